import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from vlabench.analysis.cet import ExecutionModel
from vlabench.analysis.memory import Footprint, check_fits, estimate_footprint
from vlabench.commands.run import execute, plan_run
from vlabench.config import RunConfig
from vlabench.errors import InputError, InsufficientMemoryError
from vlabench.measure.stats import summarize
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.results.assemble import control_verdict
from vlabench.results.schema import SCHEMA_VERSION, load_result, write_result


@pytest.fixture(scope="module")
def tiny_result(fast_run):
    config = fast_run.config(
        model="pi0-tiny", min_iterations=3, energy_meter=None, energy_window_s=1, idle_window_s=0.2
    )
    return execute(plan_run(config))


def test_result_records_config_statistics_and_provenance(tiny_result):
    result = tiny_result
    assert result.schema_version == SCHEMA_VERSION
    assert result.model.name == "pi0-tiny" and len(result.model.spec_hash) == 16
    assert result.config.min_iterations == 3 and result.workload.prefix_tokens == 3 * 16 + 16
    assert set(result.timing.phases) >= {"vision", "prefill", "prefix", "denoise_step", "action", "e2e", "e2e_unsynced"}
    assert len(result.timing.denoise_steps) == 10
    assert result.timing.phases["denoise_step"].count == 30
    e2e = result.timing.phases["e2e"]
    assert e2e.min <= e2e.p50 <= e2e.p90 <= e2e.p99 <= e2e.max
    provenance = result.provenance
    assert provenance.libraries["torch"] and provenance.python and provenance.cpu_cores_logical >= 1
    assert provenance.command_line
    assert result.memory.peak_rss_bytes > 0 and result.memory.cuda_max_allocated_bytes is None
    assert result.started_utc <= result.finished_utc


def test_result_round_trips_through_the_store(tiny_result, tmp_path):
    path = write_result(tiny_result, tmp_path)
    assert path.parent == tmp_path and path.name.endswith(".json") and "pi0-tiny" in path.name
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary files left behind
    assert load_result(path) == tiny_result


def test_malformed_results_are_rejected_with_the_file_name(tiny_result, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(InputError, match=r"broken\.json: not valid JSON"):
        load_result(broken)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema_version": "0.1"}))
    with pytest.raises(InputError, match="schema_version"):
        load_result(old)
    data = json.loads(tiny_result.model_dump_json())
    del data["timing"]["phases"]
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"timing\.phases"):
        load_result(partial)


def test_killed_writer_leaves_no_result_file(tiny_result, tmp_path):
    """A writer killed mid-write leaves only its hidden temporary file, never a partial result."""
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from vlabench.results.schema import RunResult, write_result
        result = RunResult.model_validate_json(Path({str(tmp_path / "source.txt")!r}).read_text())
        real_fsync = os.fsync
        def slow_fsync(fd):
            print("writing", flush=True)
            time.sleep(30)
        os.fsync = slow_fsync
        write_result(result, Path({str(tmp_path / "out")!r}))
        """
    )
    (tmp_path / "source.txt").write_text(tiny_result.model_dump_json())
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "writing"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    results = [p for p in (tmp_path / "out").iterdir() if not p.name.startswith(".partial-")]
    assert results == []


def test_control_verdict_gates_the_execution_model_at_p99():
    e2e = summarize([100.0] * 98 + [400.0, 500.0])
    chunked = ExecutionModel(mode="async", actions_per_chunk=5)
    verdict = control_verdict(e2e, control_hz=10, execution=chunked)
    assert verdict.execution == "async" and verdict.actions_per_chunk == 5
    assert verdict.inference_hz_p50 == pytest.approx(10.0)
    # 100 samples cannot bound p99 (368 can): the gate judges the slowest, 500 ms, and says so
    assert verdict.reaction_ms == pytest.approx(e2e.max) and verdict.judged_on.startswith("not enough samples")
    assert verdict.delivered_action_hz_p50 == pytest.approx(10.0)  # min(10 Hz, 5 actions / 0.1 s)
    assert verdict.meets_target is (e2e.max <= 500.0)
    per_step = control_verdict(e2e, control_hz=10, execution=ExecutionModel())
    assert per_step.actions_per_chunk == 1 and not per_step.meets_target and "inferences/s at p99" in per_step.reason
    assert control_verdict(summarize([100.0] * 10), 10, ExecutionModel()).meets_target
    assert not control_verdict(summarize([101.0] * 10), 10, ExecutionModel()).meets_target


def test_footprint_counts_weights_at_the_run_precision():
    spec = load_model_spec("pi0")
    workload = Workload.from_spec(spec)
    fp32 = estimate_footprint(spec, workload, "fp32")
    bf16 = estimate_footprint(spec, workload, "bf16")
    assert fp32.weights_bytes == 4 * fp32.params == 2 * bf16.weights_bytes
    # 18 layers x (K, V) x 1 KV head x 816 tokens x 256 dims x 2 bytes ≈ 15 MB (models.md §2)
    assert bf16.kv_cache_bytes == 18 * 2 * 816 * 256 * 2
    assert fp32.total_bytes > fp32.weights_bytes


def test_a_model_that_does_not_fit_is_refused_with_the_numbers():
    import torch

    spec = load_model_spec("pi0")
    huge = Footprint(params=1, weights_bytes=2**60, kv_cache_bytes=0, activation_bytes=0, total_bytes=2**60)
    with pytest.raises(InsufficientMemoryError, match=r"needs about .* GiB .* only .* GiB is available"):
        check_fits(spec, huge, torch.device("cpu"), "fp32")


def test_plan_refuses_before_allocating():
    with pytest.raises(InsufficientMemoryError):
        plan_run(RunConfig(model="pi0", cameras=20000))


def test_warnings_name_noisy_phases_background_load_and_the_cap():
    from vlabench.measure.timing import Measurement
    from vlabench.results.assemble import measurement_warnings

    steady, noisy = summarize([10.0] * 10), summarize([5.0, 15.0] * 5)
    phases = {"vision": steady, "prefill": noisy, "action": steady, "e2e": steady}
    capped = Measurement(samples_ms={}, first_inference_ms=1.0, iterations=5, timed_duration_s=1.0, actions=None)
    quiet = quiet_state(3.0)
    busy = quiet_state(90.0)
    config = RunConfig(min_iterations=5, max_iterations=5, min_duration_s=10)
    messages = measurement_warnings(phases, config, capped, busy)
    assert any(m.startswith("prefill: coefficient of variation 52.7%") for m in messages)
    assert not any(m.startswith("vision") for m in messages)
    assert any("90% busy" in m for m in messages)
    assert any("--max-iterations 5" in m for m in messages)
    uncapped = Measurement(samples_ms={}, first_inference_ms=1.0, iterations=5, timed_duration_s=11.0, actions=None)
    assert measurement_warnings(dict.fromkeys(phases, steady), config, uncapped, quiet) == []


def quiet_state(busy_percent: float):
    from vlabench.telemetry.system_state import SystemState

    return SystemState(
        background_cpu_percent=busy_percent,
        load_average_1m=0.1,
        cpu_governor="performance",
        cpu_freq_mhz=None,
        cpu_freq_max_mhz=None,
        jetson_power_mode=None,
        gpu=None,
    )


def test_bf16_on_a_cpu_without_native_bf16_is_flagged_before_the_run():
    from vlabench.hardware.detection import cpu_has_native_bf16

    if cpu_has_native_bf16():
        pytest.skip("this CPU has native bf16")
    plan = plan_run(RunConfig(model="smolvla-tiny", precision="bf16", energy_meter="none"))
    assert any("no native bf16" in caveat for caveat in plan.caveats)
    assert plan_run(RunConfig(model="smolvla-tiny", energy_meter="none")).caveats == ()
