import json

import torch
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.kernels.ceilings import gemm_peak, measure_ceilings, stream_bandwidth


def test_gemm_peak_reports_a_positive_rate_with_its_method():
    ceiling = gemm_peak("fp32", torch.device("cpu"), budget_s=0.05, max_size=256)
    assert ceiling.unit == "TFLOP/s" and ceiling.value > 0 and ceiling.repetitions >= 3
    assert "256×256×256 fp32" in ceiling.detail


def test_a_quantized_precision_measures_only_the_bandwidth():
    # int8/int4 have no float GEMM to time (a run at int8 with --measure-ceilings used to die with KeyError 'int8')
    measured = measure_ceilings(torch.device("cpu"), ("int8", "int4"))
    assert [ceiling.unit for ceiling in measured] == ["GB/s"]


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
