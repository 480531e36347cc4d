"""vlabench profile: utilization counters on recorded and live data, the Chrome trace, per-phase summaries, runtime
node events."""

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from tests.support import paths
from vlabench.cli.app import app
from vlabench.commands.profile import summarize_phases
from vlabench.measure.trace_writer import ChromeTrace
from vlabench.telemetry.counters import CpuCounter, NvmlCounter, Series, TegrastatsCounter, tegrastats_values

DATA = paths.DATA / "energy"
MS = 1_000_000


def recorded(name: str) -> list[str]:
    return [line for line in (DATA / name).read_text().splitlines() if line and not line.startswith("#")]


def test_tegrastats_values_from_a_recorded_agx_orin_line():
    values = tegrastats_values(recorded("tegrastats_jp5.txt")[0])
    assert values["gpu utilization"] == {"gr3d": 0.0}
    assert values["gpu memory utilization"] == {"emc": 0.0}
    assert len([k for k in values["cpu utilization"] if k.startswith("cpu")]) == 12
    assert values["rail power"]["VDD_GPU_SOC"] == pytest.approx(2.796)


def test_tegrastats_counter_turns_each_line_into_the_interval_since_the_previous_one():
    lines = recorded("tegrastats_jp4.txt")
    stamped = [(1_000 * MS + i * 100 * MS, line) for i, line in enumerate(lines)]
    counter = TegrastatsCounter(period_s=0.1, lines=stamped)
    counter.start()
    series = {s.name: s for s in counter.stop()}
    gpu = series["gpu utilization"].samples["gr3d"]
    assert len(gpu) == len([line for line in lines if "GR3D" in line])
    assert gpu[0].end_ns - gpu[0].start_ns == 100 * MS
    assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(gpu))
    assert series["rail power"].unit == "W"


class CountedCpuCounter(CpuCounter):
    """A CpuCounter that counts its reads (the one that primes it at start included)."""

    reads = 0

    def read(self):
        values = super().read()
        self.reads += 1
        return values


def test_cpu_counter_reads_per_core_load_and_a_mean():
    counter = CountedCpuCounter(period_s=0.02)
    counter.start()
    matrix = torch.randn(256, 256)
    for _ in range(1_000_000):  # busy until five periodic reads were taken, however slowly the host runs
        if counter.reads >= 6:
            break
        matrix @ matrix  # releases the GIL, as model inference does, so the counter thread gets to read
    series = {s.name: s for s in counter.stop()}
    load = series["cpu utilization"]
    assert load.headline == "mean" and "cpu0" in load.samples
    assert len(load.samples["mean"]) >= 5
    assert all(0.0 <= s.value <= 100.0 for s in load.samples["mean"])
    assert max(s.value for s in load.samples["mean"]) > 0  # the matmul loop kept a core busy


def test_nvml_counter_maps_the_nvml_readings():
    """NVML cannot run here; the mapping from its calls to series is checked against a stand-in module."""
    fake = SimpleNamespace(
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        nvmlDeviceGetUtilizationRates=lambda d: SimpleNamespace(gpu=93, memory=41),
        nvmlDeviceGetPowerUsage=lambda d: 287_500,
        nvmlDeviceGetClockInfo=lambda d, kind: {1: 2520, 2: 10501}[kind],
    )
    counter = NvmlCounter.__new__(NvmlCounter)
    counter.nvml, counter.device = fake, object()
    values = counter.read()
    assert values["gpu utilization"] == {"gpu": 93.0} and values["gpu power"] == {"board": 287.5}
    assert values["gpu clocks"] == {"sm": 2520.0, "memory": 10501.0}


def test_summary_weights_each_sample_by_its_overlap_with_the_phase():
    series = Series("cpu utilization", "%", headline="mean")
    series.add("mean", 0, 10 * MS, 100.0)  # fully inside vision
    series.add("mean", 10 * MS, 30 * MS, 50.0)  # half vision, half prefill
    series.add("mean", 30 * MS, 40 * MS, 20.0)  # prefill only
    events = [("vision", 0, 20 * MS), ("prefill", 20 * MS, 40 * MS), ("e2e", 0, 40 * MS)]
    rows = {row.phase: row for row in summarize_phases(events, [series], None)}
    vision = rows["vision"].counters["cpu utilization"]
    assert vision.mean == pytest.approx((100 * 10 + 50 * 10) / 20) and vision.peak == 100
    prefill = rows["prefill"].counters["cpu utilization"]
    assert prefill.mean == pytest.approx((50 * 10 + 20 * 10) / 20) and prefill.peak == 50
    assert rows["vision"].share_of_e2e == pytest.approx(0.5)


def test_chrome_trace_spans_counters_and_shifted_external_events():
    trace = ChromeTrace(origin_ns=1_000 * MS, title="t")
    trace.span("vision", 1_000 * MS, 1_005 * MS, "phases")
    series = Series("cpu utilization", "%")
    series.add("cpu0", 1_000 * MS, 1_010 * MS, 75.0)
    trace.counters([series])
    trace.external([{"ph": "X", "name": "aten::mm", "pid": 4242, "tid": 1, "ts": 100.0, "dur": 2.0}], "torch", 50.0)
    events = trace.to_json()["traceEvents"]
    span = next(e for e in events if e.get("name") == "vision")
    assert span["ts"] == 0 and span["dur"] == 5000
    counter = next(e for e in events if e["ph"] == "C")
    assert counter["name"] == "cpu utilization (%)" and counter["args"] == {"cpu0": 75.0}
    merged = next(e for e in events if e.get("name") == "aten::mm")
    assert merged["ts"] == 150.0 and merged["pid"] not in (1, 2)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert "torch (4242)" in names


def load_outputs(folder: Path) -> tuple[dict, dict]:
    profile = json.loads(next(folder.glob("*.profile.json")).read_text())
    trace = json.loads((folder / profile["trace_file"]).read_text())
    return profile, trace


def test_profile_cli_torch_with_kernels(tmp_path):
    args = ["profile", "--model", "smolvla-tiny", "--iterations", "3", "--min-duration", "0.5", "--kernels"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    profile, trace = load_outputs(tmp_path)
    assert [p["name"] for p in profile["passes"]] == ["ceilings", "trace", "operators"]
    assert profile["energy"] is None
    events = trace["traceEvents"]
    assert all({"ph", "pid"} <= set(e) for e in events)
    traced = [e for e in events if e.get("cat") == "phases (trace pass)"]
    assert {"vision", "prefill", "denoise_step[0]", "action", "e2e"} <= {e["name"] for e in traced}
    assert any(e["ph"] == "C" and e["name"] == "cpu utilization (%)" for e in events)
    ours = min(e["ts"] for e in events if e.get("cat") == "phases (operators pass)" and e["name"] == "e2e")
    annotation = min(e["ts"] for e in events if e.get("name") == "vlabench::e2e")
    assert annotation == pytest.approx(ours, abs=1.0)  # the torch profiler was shifted onto our clock
    assert any(e.get("cat") == "cpu_op" and e["name"].startswith("aten::") for e in events)
    rows = {row["phase"]: row for row in profile["summary"]}
    assert {"vision", "prefill", "denoise_step", "e2e"} <= set(rows)
    assert rows["denoise_step"]["bound"] in ("compute", "memory") and rows["prefill"]["intensity"] > 0
    assert "cpu utilization" in rows["e2e"]["counters"]
    assert "Profile: smolvla-tiny" in result.output
    ranked = CliRunner().invoke(app, ["rank", str(tmp_path)])
    assert "skipped" not in ranked.output  # trace and profile files are not mistaken for broken results


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_profile_merges_runtime_node_events_onto_the_phase_clock(tmp_path, backend):
    args = ["profile", "--model", "smolvla-tiny", "--backend", backend, "--iterations", "2", "--min-duration", "0"]
    result = CliRunner().invoke(app, [*args, "--no-measure-ceilings", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    profile, trace = load_outputs(tmp_path)
    assert profile["passes"][-1]["instruments"] == [f"{backend} node profiler"]
    events = trace["traceEvents"]
    nodes = [e for e in events if e.get("cat") == f"{backend} nodes (operators pass)"]
    assert nodes and all(e["dur"] >= 0 and "op" in e["args"] for e in nodes)
    passes = [e for e in events if e.get("cat") == "phases (operators pass)" and e["name"] == "e2e"]
    e2e = [(e["ts"], e["ts"] + e["dur"]) for e in passes]
    inside = [n for n in nodes if any(a - 1000 <= n["ts"] <= b + 1000 for a, b in e2e)]
    assert len(inside) >= 0.9 * len(nodes)  # within 1 ms: the runtime's clock was mapped onto ours


def test_profile_rejects_several_backends(tmp_path):
    result = CliRunner().invoke(app, ["profile", "--backend", "torch,onnxruntime", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "one --backend" in result.output


def test_profile_times_the_dp_cache_schedule_a_config_file_plans(tmp_path):
    """A ``--config`` with ``dp_cache:`` is profiled with it: only the schedule's computed steps call the expert."""
    config = tmp_path / "run.yaml"
    config.write_text('model: smolvla-tiny\ndp_cache: "{0,2,4,6,8}"\nthreads: 1\n')
    args = ["profile", "--config", str(config), "--iterations", "3", "--min-duration", "0", "--no-measure-ceilings"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    profile, trace = load_outputs(tmp_path / "out")
    traced = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "phases (trace pass)"]
    steps = {name for name in traced if name.startswith("denoise_step[")}
    assert steps == {f"denoise_step[{i}]" for i in (0, 2, 4, 6, 8)}
    rows = {row["phase"]: row for row in profile["summary"]}
    assert rows["denoise_step"]["spans"] == 5 * rows["e2e"]["spans"]
