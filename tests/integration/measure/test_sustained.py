"""Cold start (preparation stage by stage), when a run stops (the p99 count, --max-duration, --duration), latency per
window and drift, and the thermal, clock and throttle sensors, from the stage clock up to ``vlabench run``."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from typer.testing import CliRunner

import vlabench.measure.cold_start
from tests.support import paths, recorded
from tests.support.fast_run import FAST_RUN
from vlabench.backends import backend_class, get_backend
from vlabench.cli.app import app
from vlabench.commands.run import plan_run, prepare_contender
from vlabench.config import RunConfig
from vlabench.measure.action_loops import EulerLoop
from vlabench.measure.cold_start import STAGES, StageClock, TimedStage, recording, stage, timed_preparation
from vlabench.measure.run_settings import iteration_cap, runner_settings
from vlabench.measure.stats import P99_BOUND_SAMPLES
from vlabench.measure.timing import Contender, RunnerSettings, measure_interleaved
from vlabench.results.sustained import (
    SensorSample,
    full_windows,
    latency_windows,
    sensor_samples,
    sustained,
    throttling,
)
from vlabench.telemetry.sensors import SensorCounter, read_sensors

DATA = paths.DATA / "sensors"
TINY_MODELS = recorded.TINY_MODELS
CPU = torch.device("cpu")
runner = CliRunner()


def build_tree(name: str, root: Path) -> Path:
    return recorded.build_tree(DATA / name, root)


def reading(name: str, root: Path) -> dict[str, dict[str, float]]:
    return read_sensors(build_tree(name, root / name.removesuffix(".tree")))


# --- the stage clock ---------------------------------------------------------------------------------------------


def test_nested_stages_record_exclusive_times_within_the_preparation(monkeypatch):
    now = [0]
    monkeypatch.setattr(vlabench.measure.cold_start, "perf_counter_ns", lambda: now[0])

    def work(seconds: float) -> None:  # the stage clock's time moves only by the work done
        now[0] += round(seconds * 1e9)

    def prepare() -> str:
        work(0.01)  # outside any stage
        with stage("export"):
            work(0.05)  # the export's own work
            with stage("load"):
                work(0.1)
        return "prepared"

    prepared, preparation = timed_preparation(prepare)
    assert prepared == "prepared"
    assert set(preparation.stages) == {"export", "load"}
    load, export = preparation.stages["load"].seconds, preparation.stages["export"].seconds
    assert load == pytest.approx(0.1) and preparation.seconds == pytest.approx(0.16)
    assert export == pytest.approx(0.05)  # without the inner load's 0.1 s
    assert not any(timed.cached for timed in preparation.stages.values())


def test_a_stage_outside_recording_is_a_no_op():
    with stage("load") as timed:
        time.sleep(0.01)
    assert timed.seconds == 0.0
    with recording() as clock:
        pass
    assert clock.stages == [] and clock.open == []


def test_a_stage_that_raises_is_still_recorded_and_closed():
    with recording() as clock:
        with pytest.raises(RuntimeError), stage("compile"), stage("load"):
            raise RuntimeError("boom")
        with stage("quantize"):
            pass
    assert [timed.name for timed in clock.stages] == ["load", "compile", "quantize"]
    assert clock.open == []


def test_an_unknown_stage_is_refused_naming_the_stages():
    with pytest.raises(ValueError, match=r"'warp'.*load, export"), stage("warp"):
        pass
    with recording() as clock, pytest.raises(ValueError, match="warp"), stage("warp"):
        pass
    assert clock.stages == []


def test_totals_sum_repeated_stages_and_are_cached_only_when_every_run_was():
    with recording() as clock:
        for cached in (True, False):
            with stage("compile") as timed:
                timed.cached = cached
        for _ in range(2):
            with stage("export") as timed:
                timed.cached = True
        with stage("load"):
            pass
    totals = clock.totals()
    assert set(totals) == {"compile", "export", "load"}
    assert totals["compile"].cached is False
    assert totals["export"].cached is True and totals["load"].cached is False
    per_name = {name: sum(t.seconds for t in clock.stages if t.name == name) for name in totals}
    assert {name: timed.seconds for name, timed in totals.items()} == pytest.approx(per_name)

    handmade = StageClock(
        stages=[TimedStage("convert", True, 0.25), TimedStage("convert", True, 0.5), TimedStage("quantize", False, 1.0)]
    )
    assert handmade.totals()["convert"] == TimedStage("convert", cached=True, seconds=0.75)
    assert handmade.totals()["quantize"].seconds == 1.0 and not handmade.totals()["quantize"].cached


# --- every backend's cold start ----------------------------------------------------------------------------------


def unavailable(backend: str, precision: str = "fp32") -> str | None:
    """Why ``backend`` cannot prepare ``precision`` on this CPU (None: it can)."""
    instance = backend_class(backend)()
    reason = instance.unavailable_reason(CPU)
    if reason is None and precision not in instance.precisions(CPU):
        reason = f"no {precision} on this CPU (it runs {', '.join(instance.precisions(CPU))})"
    return reason


def needs(backend: str, precision: str = "fp32") -> pytest.MarkDecorator:
    reason = unavailable(backend, precision)
    return pytest.mark.skipif(reason is not None, reason=f"{backend} {precision} cannot run here: {reason}")


def prepared_stages(backend: str, precision: str | None = None):
    config = FAST_RUN.config(model="smolvla-tiny", backend=backend, precision=precision, warmup=None)
    return prepare_contender(plan_run(config)).policy.preparation


def backend_param(backend: str, precision: str | None, wanted: set[str], exact: bool = False):
    shown = precision or "fp32"
    return pytest.param(backend, precision, wanted, exact, id=f"{backend}-{shown}", marks=needs(backend, shown))


@pytest.mark.parametrize(
    ("backend", "precision", "wanted", "exact"),
    [
        backend_param("torch", None, {"load"}, exact=True),
        backend_param("onnxruntime", None, {"export", "compile"}),
        backend_param("openvino", None, {"export", "convert", "compile"}),
        backend_param("torch-compile", None, {"load", "compile"}),
        backend_param("torch", "int8", {"quantize"}),
    ],
)
def test_each_backend_times_its_preparation_stages(module_cache, backend, precision, wanted, exact):
    preparation = prepared_stages(backend, precision)
    assert preparation is not None
    stages = set(preparation.stages)
    assert stages == wanted if exact else wanted <= stages
    assert stages <= set(STAGES)
    assert preparation.seconds > 0
    assert sum(timed.seconds for timed in preparation.stages.values()) <= preparation.seconds
    assert all(timed.seconds >= 0 for timed in preparation.stages.values())


@pytest.mark.parametrize(
    ("backend", "reused"),
    [
        pytest.param(name, reused, marks=needs(name))
        for name, reused in (("onnxruntime", {"export"}), ("openvino", {"export", "convert"}))
    ],
)
def test_a_second_preparation_reuses_the_cached_artifacts(tmp_path, monkeypatch, backend, reused):
    monkeypatch.setenv("VLABENCH_CACHE", str(tmp_path))  # empty: the first preparation does the work
    first = prepared_stages(backend)
    second = prepared_stages(backend)
    for name in reused:
        assert first.stages[name].cached is False, name
        assert second.stages[name].cached is True, name
    assert "load" in first.stages and "load" not in second.stages  # reused graphs: no model was built
    assert second.stages["compile"].cached is False  # sessions and compiled models are never reused


# --- when a run stops --------------------------------------------------------------------------------------------


def test_runner_settings_default_to_the_p99_count_within_the_caps():
    assert P99_BOUND_SAMPLES == 368
    default = runner_settings(RunConfig())
    assert default.min_iterations == P99_BOUND_SAMPLES
    assert default.max_iterations == 1000 and default.max_duration_s == 120.0 and default.min_duration_s == 10.0
    assert runner_settings(RunConfig(max_iterations=100)).min_iterations == 100
    assert runner_settings(RunConfig(min_iterations=7)).min_iterations == 7
    assert runner_settings(RunConfig(min_duration_s=200.0)).max_duration_s == 200.0  # never below min_duration_s
    assert runner_settings(RunConfig(max_duration_s=0.3, min_duration_s=0)).max_duration_s == 0.3
    assert iteration_cap(RunConfig(max_iterations=50)) == 50


def test_a_sustained_run_times_for_its_duration():
    config = RunConfig(duration_s=5.0, warmup=3)
    assert runner_settings(config) == RunnerSettings(3, 1, 5.0, 5000, 5.0)
    assert iteration_cap(config) == 5000
    assert iteration_cap(RunConfig(duration_s=7 * 86_400.0)) == 1_000_000  # bounded by max_iterations' limit


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("min_iterations", 3, "--min-iterations"),
        ("max_iterations", 50, "--max-iterations"),
        ("min_duration_s", 0.0, "--min-duration"),
        ("max_duration_s", 30.0, "--max-duration"),
    ],
)
def test_duration_refuses_the_count_settings(field, value, flag):
    with pytest.raises(ValidationError, match=flag):
        RunConfig(duration_s=5.0, **{field: value})


def test_duration_accepts_the_count_settings_at_their_defaults():
    config = RunConfig(duration_s=5.0, min_iterations=None, max_iterations=1000, min_duration_s=10.0)
    assert config.duration_s == 5.0


@pytest.fixture
def tiny_contender(tiny_inputs) -> Contender:
    spec, workload, obs, noise = tiny_inputs("smolvla-tiny")
    policy = get_backend("torch").prepare(spec, workload, CPU, "fp32", seed=0)
    return Contender(policy, EulerLoop(workload.steps, 1, CPU), [(obs, noise)])


def test_measure_interleaved_stops_at_max_duration(tiny_contender):
    expected: list[int] = []

    def progress(done: int, total: int) -> None:
        expected.append(total)
        assert done < 500, "max_duration_s did not stop the pass"

    settings = RunnerSettings(
        warmup=0, min_iterations=10**6, min_duration_s=0, max_iterations=10**6, max_duration_s=0.3
    )
    (measurement,) = measure_interleaved([tiny_contender], settings, progress)
    assert measurement.timed_duration_s >= 0.3
    assert 1 <= measurement.iterations < 10**6
    assert len(measurement.samples_ms["e2e"]) == measurement.iterations
    starts = measurement.iteration_starts_ns
    assert len(starts) == measurement.iterations
    assert all(later > earlier for earlier, later in itertools.pairwise(starts))
    assert max(expected) < 10**6  # the progress total counts to the cap, not to min_iterations


# --- latency per window ------------------------------------------------------------------------------------------

BEGAN_NS = 5_000_000_000


def synthetic_pass() -> tuple[list[int], list[float]]:
    """One inference every 0.1 s (starting 0.05 s into each slot) over 3.3 one-second windows; window k's latencies are
    10(k+1) … 10(k+1)+9 ms, the partial last window's 100, 101, 102 ms."""
    starts, latencies = [], []
    for index in range(33):
        window, slot = divmod(index, 10)
        starts.append(BEGAN_NS + index * 100_000_000 + 50_000_000)
        latencies.append(100.0 + slot if window == 3 else 10.0 * (window + 1) + slot)
    return starts, latencies


def test_latency_windows_group_inferences_by_their_start():
    starts, latencies = synthetic_pass()
    windows = latency_windows(starts, latencies, BEGAN_NS, 1.0)
    assert [window.count for window in windows] == [10, 10, 10, 3]
    assert [window.start_s for window in windows] == [0.0, 1.0, 2.0, 3.0]
    assert [window.end_s for window in windows] == [1.0, 2.0, 3.0, 4.0]
    assert [window.p50 for window in windows] == pytest.approx([14.5, 24.5, 34.5, 101.0])
    assert [window.max for window in windows] == [19.0, 29.0, 39.0, 102.0]
    assert windows[0].p99 == pytest.approx(18.91)
    assert sum(window.count for window in windows) == len(starts)


def test_windows_without_an_inference_are_left_out():
    windows = latency_windows([BEGAN_NS + 100_000_000, BEGAN_NS + 2_500_000_000], [1.0, 2.0], BEGAN_NS, 1.0)
    assert [(window.start_s, window.count) for window in windows] == [(0.0, 1), (2.0, 1)]
    assert latency_windows([], [], BEGAN_NS, 1.0) == []
    assert full_windows([]) == []


def test_full_windows_leave_out_the_partial_last_window_and_drift_uses_them():
    starts, latencies = synthetic_pass()
    windows = latency_windows(starts, latencies, BEGAN_NS, 1.0)
    assert [window.start_s for window in full_windows(windows)] == [0.0, 1.0, 2.0]
    trace = sustained(starts, latencies, BEGAN_NS, 1.0, [], 0.5)
    assert trace.windows == windows
    assert trace.p50_drift == pytest.approx(34.5 / 14.5 - 1)  # not the partial window's 101 ms
    assert trace.window_s == 1.0 and trace.sensor_period_s == 0.5
    assert trace.sensors == [] and trace.throttling == []


def test_drift_needs_two_full_windows():
    starts, latencies = synthetic_pass()
    trace = sustained(starts[:10], latencies[:10], BEGAN_NS, 1.0, [], 1.0)
    assert len(trace.windows) == 1 and trace.p50_drift is None


# --- sensors -----------------------------------------------------------------------------------------------------


def test_read_sensors_on_a_jetson_orin(tmp_path):
    found = reading("sysfs_orin_jp6_start.tree", tmp_path)
    temperatures = found["temperature_c"]
    assert temperatures["cpu-thermal"] == pytest.approx(48.218)
    assert temperatures["tj-thermal"] == pytest.approx(48.218)
    assert temperatures["gpu-thermal"] == pytest.approx(47.375)
    assert set(temperatures) == {"cpu-thermal", "gpu-thermal", "cv0-thermal", "soc0-thermal", "tj-thermal"}
    assert found["clock_mhz"] == pytest.approx({"cpu mean": 1510.4, "cpu min": 1510.4, "17000000.gpu": 624.75})
    assert found["throttle_events"] == {}


def test_read_sensors_on_a_xeon(tmp_path):
    found = reading("sysfs_xeon_start.tree", tmp_path)
    assert found["temperature_c"] == pytest.approx(
        {"coretemp/Package id 0": 52.0, "coretemp/Core 0": 50.0, "coretemp/Core 1": 51.0, "x86_pkg_temp": 52.0}
    )
    assert found["clock_mhz"] == pytest.approx({"cpu mean": 3400.0, "cpu min": 3400.0})
    assert found["throttle_events"] == {"core": 0, "package": 4}


def test_read_sensors_on_an_empty_tree_finds_nothing(tmp_path):
    assert read_sensors(tmp_path) == {"temperature_c": {}, "clock_mhz": {}, "throttle_events": {}}


def pair(board: str, root: Path) -> list[SensorSample]:
    return [
        SensorSample(t_s=0.0, values=reading(f"sysfs_{board}_start.tree", root)),
        SensorSample(t_s=60.0, values=reading(f"sysfs_{board}_end.tree", root)),
    ]


def test_throttling_names_the_clocks_that_fell_on_an_orin(tmp_path):
    found = throttling(pair("orin_jp6", tmp_path))
    assert "17000000.gpu clock 625 → 306 MHz (-51%)" in found
    assert "cpu min clock 1510 → 730 MHz (-52%)" in found
    assert not any("throttle events" in change for change in found)


def test_throttling_names_the_throttle_events_on_a_xeon(tmp_path):
    assert throttling(pair("xeon", tmp_path)) == ["core throttle events: +6"]


@pytest.mark.parametrize("board", ["orin_jp6", "xeon"])
def test_no_change_is_no_throttling(tmp_path, board):
    start = reading(f"sysfs_{board}_start.tree", tmp_path)
    assert throttling([SensorSample(t_s=0.0, values=start), SensorSample(t_s=1.0, values=start)]) == []
    assert throttling([SensorSample(t_s=0.0, values=start)]) == []


def test_sensor_counter_reads_at_start_every_period_and_at_stop(tmp_path):
    root = build_tree("sysfs_orin_jp6_start.tree", tmp_path)
    counter = SensorCounter(0.05, root=root)
    began = time.perf_counter_ns()
    counter.start()
    started = time.perf_counter_ns()
    time.sleep(0.3)
    stopping = time.perf_counter_ns()
    series = counter.stop()
    ended = time.perf_counter_ns()
    samples = sensor_samples(series, began)
    assert len(samples) >= 3
    times = [sample.t_s for sample in samples]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert 0 <= times[0] <= (started - began) / 1e9  # read as it starts, before the first period
    assert (stopping - began) / 1e9 <= times[-1] <= (ended - began) / 1e9  # and once more as it stops
    for sample in samples:
        assert sample.values["temperature_c"]["cpu-thermal"] == pytest.approx(48.218)
        assert sample.values["temperature_c"]["tj-thermal"] == pytest.approx(48.218)
        assert sample.values["clock_mhz"]["17000000.gpu"] == pytest.approx(624.75)
    assert throttling(samples) == []


# --- end to end from the CLI -------------------------------------------------------------------------------------


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_every_tiny_family_is_covered():
    assert {
        "smolvla-tiny",
        "pi0-tiny",
        "pi05-tiny",
        "pi0-fast-tiny",
        "gr00t-n1.5-tiny",
        "openvla-7b-tiny",
        "openvla-oft-tiny",
        "act-tiny",
        "diffusion-policy-tiny",
    } <= set(TINY_MODELS)


@pytest.mark.parametrize("model", TINY_MODELS)
def test_a_sustained_run_records_its_cold_start_windows_and_sensors(fast_run, tmp_path, model):
    result = invoke(
        "run", "-m", model, "--duration", "0.4", "--window", "0.2", "--idle-probe", "0.05",
        *fast_run.args(min_iterations=None, min_duration_s=None), "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["config"]["duration_s"] == 0.4

    cold, timing = data["cold_start"], data["timing"]
    assert cold["prepare_s"] > 0
    assert cold["stages"] and set(cold["stages"]) <= set(STAGES)
    assert sum(stage["seconds"] for stage in cold["stages"].values()) <= cold["prepare_s"]
    assert cold["to_first_action_s"] == pytest.approx(cold["prepare_s"] + timing["first_inference_ms"] / 1000)
    assert cold["after_idle_ms"] > 0 and cold["idle_s"] == 0.05

    trace = data["sustained"]
    assert trace["window_s"] == 0.2
    assert sum(window["count"] for window in trace["windows"]) == timing["iterations"] > 0
    assert [window["start_s"] for window in trace["windows"]] == sorted(w["start_s"] for w in trace["windows"])
    host_has_sensors = any(read_sensors().values())  # a VM may expose none: no cpufreq, thermal zone, psutil clock
    assert len(trace["sensors"]) >= (2 if host_has_sensors else 0)
    assert [sample["t_s"] for sample in trace["sensors"]] == sorted(sample["t_s"] for sample in trace["sensors"])

    (saved,) = tmp_path.glob("*.json")
    checked = invoke("validate", str(saved), "--allow-dirty", "--min-iterations", "1", "--min-duration", "0", "--json")
    problems = json.loads(checked.stdout)
    assert all(problem["field"] == "energy" for problem in problems), problems
    assert checked.exit_code == (6 if problems else 0), checked.output


def test_a_run_cut_short_by_max_duration_says_so(fast_run, tmp_path):
    result = invoke(
        "run", "-m", "smolvla-tiny", "--max-duration", "0.3", *fast_run.args(min_iterations=None),
        "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert 1 <= data["timing"]["iterations"] < P99_BOUND_SAMPLES
    assert data["config"]["min_iterations"] is None
    assert any("(--max-duration, at least --min-duration)" in warning for warning in data["warnings"]), data["warnings"]
    assert "not enough samples for p99" in data["control"]["judged_on"]
    assert data["cold_start"]["idle_s"] is None and data["cold_start"]["after_idle_ms"] is None  # not probed


def test_the_cli_refuses_duration_with_min_iterations(fast_run, tmp_path):
    flags = ["--duration", "1", "--min-iterations", "5"]
    timed_by_duration = fast_run.args(min_iterations=None, min_duration_s=None)
    result = invoke("run", "-m", "smolvla-tiny", *flags, *timed_by_duration, "--out", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert "--min-iterations" in result.output
    assert "Traceback" not in result.output
    assert list(tmp_path.glob("*.json")) == []


def test_the_plan_line_states_the_stop_rule_the_run_applies():
    from vlabench.cli.views.run import timing_plan

    assert "368 (enough to bound p99)" in timing_plan(RunConfig()) and "caps: 1000 inferences, 120 s" in timing_plan(
        RunConfig()
    )
    capped = timing_plan(RunConfig(max_iterations=3, min_duration_s=200.0))
    assert "3 (p99 needs 368: capped)" in capped and "caps: 3 inferences, 200 s" in capped
    assert timing_plan(RunConfig(min_iterations=7)).startswith("≥ 7 inferences")
    assert timing_plan(RunConfig(duration_s=5.0)).startswith("sustained for 5 s")
