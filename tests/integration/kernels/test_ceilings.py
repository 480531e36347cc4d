import json

import torch
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.commands.run import execute_many, plan_run
from vlabench.kernels.ceilings import gemm_peak, measure_ceilings, stream_bandwidth


def test_gemm_peak_reports_a_positive_rate_with_its_method():
    ceiling = gemm_peak("fp32", torch.device("cpu"), budget_s=0.05, max_size=256)
    assert ceiling.unit == "TFLOP/s" and ceiling.value > 0 and ceiling.repetitions >= 3
    assert "256×256×256 fp32" in ceiling.detail


def test_int8_times_the_integer_gemm_and_int4_only_the_bandwidth():
    # int4 has no GEMM of its own (a run at int8 with --measure-ceilings once died with KeyError 'int8')
    measured = measure_ceilings(torch.device("cpu"), ("int8", "int4"))
    assert [(ceiling.quantity, ceiling.unit) for ceiling in measured] == [
        ("gemm_int8", "TOP/s"),
        ("memory_bandwidth", "GB/s"),
    ]
    assert measured[0].value > 0 and "torch._int_mm" in measured[0].detail


def test_the_int8_ceiling_is_the_best_of_int_mm_and_vlabenchs_kernel_where_it_runs():
    """Where a path of vlabench's int8 kernel runs, the int8 ceiling is the faster of it and ``torch._int_mm`` at the
    same size, and its detail gives both rates; elsewhere it is ``torch._int_mm`` alone."""
    import re

    import pytest

    from vlabench.kernels import amx_int8

    ceiling = gemm_peak("int8", torch.device("cpu"), budget_s=0.05, max_size=256)
    if all(amx_int8.unavailable_reason(isa) for isa in amx_int8.ISAS):
        assert ceiling.detail.startswith("torch._int_mm 256×256×256")
        pytest.skip("no int8 kernel path runs here: the ceiling is torch._int_mm's alone (checked above)")
    rates = [float(rate) for rate in re.findall(r"\(([0-9.]+) TOP/s\)", ceiling.detail)]
    assert len(rates) == 2 and "vlabench's int8 kernel" in ceiling.detail and "256×256×256" in ceiling.detail
    assert round(ceiling.value, 3) == pytest.approx(max(rates), abs=1e-3)


def test_stream_bandwidth_counts_read_and_write():
    ceiling = stream_bandwidth(torch.device("cpu"), megabytes=16, budget_s=0.05)
    assert ceiling.unit == "GB/s" and ceiling.value > 0
    assert "read + write" in ceiling.detail


def test_devices_measure_json():
    result = CliRunner().invoke(app, ["devices", "--measure", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    quantities = {c["quantity"]: c for c in data["measured"]["ceilings"]}
    assert set(quantities) == {"gemm_fp32", "memory_bandwidth"}
    assert data["measured"]["device"] == next(row["name"] for row in data["profiles"] if row["auto"])
    assert all(row["sources"] for row in data["profiles"] if row["price_usd"])


def test_plans_timed_side_by_side_rest_on_one_bandwidth_reading(fast_run):
    # Each precision's ceilings used to be measured for its own plan, so two plans of one process got two
    # bandwidth readings of a drifting host and floors that disagreed on the same weights.
    base = fast_run.config(model="smolvla-tiny", measure_ceilings=True)
    plans = [plan_run(base.model_copy(update={"precision": precision})) for precision in ("fp32", "bf16")]
    results = execute_many(plans)
    measured = [next(c for c in r.roofline.ceilings if c.source == "measured") for r in results]
    assert [c.precision for c in measured] == ["fp32", "bf16"]
    assert measured[0].bandwidth_gbs == measured[1].bandwidth_gbs
    assert measured[0].peak_tflops != measured[1].peak_tflops  # each precision keeps its own GEMM peak
