"""Sweep files, their expansion and identity, child-process execution, the journal, resume after SIGKILL, and
concurrent writers into one results folder."""

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import yaml
from typer.testing import CliRunner

from tests.support.fast_run import FAST_RUN
from vlabench.cli.app import app
from vlabench.commands.run import ConfiguredRun, Subprocess, execute, plan_run
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.fleet.local_runner import (
    STAGED_SUFFIX,
    SweepStore,
    execute_sweep,
    run_locally,
)
from vlabench.fleet.sweep_file import SweepFile, expand, parse_sweep, run_key
from vlabench.results.aggregate import load_results
from vlabench.results.launch_outcome import LaunchOutcome
from vlabench.results.schema import RunResult, load_result, write_result
from vlabench.results.sweep_record import RunRecord


def sweep_yaml(matrix: dict, **extra) -> str:
    return yaml.safe_dump(
        {"fixed": FAST_RUN.fields(device="cpu", energy_window_s=1, idle_window_s=0.1), "matrix": matrix, **extra}
    )


def test_expansion_orders_model_backend_precision_slowest_and_applies_exclusions():
    sweep = parse_sweep(
        sweep_yaml(
            {"dp_cache": [None, "{0,1,2,6,8,9}"], "backend": ["torch", "openvino"], "model": ["pi0-tiny", "a-tiny"]},
            exclude=[{"model": "a-tiny", "backend": "openvino"}],
        ),
        "s.yaml",
    )
    runs = expand(sweep)
    order = [(r.config.model, r.config.backend, r.config.dp_cache) for r in runs]
    assert order == [
        ("pi0-tiny", "torch", None),
        ("pi0-tiny", "torch", "{0,1,2,6,8,9}"),
        ("pi0-tiny", "openvino", None),
        ("pi0-tiny", "openvino", "{0,1,2,6,8,9}"),
        ("a-tiny", "torch", None),
        ("a-tiny", "torch", "{0,1,2,6,8,9}"),
    ]
    assert all(r.config.min_iterations == 2 and r.config.device == "cpu" for r in runs)
    assert len({r.key for r in runs}) == len(runs)


def test_every_run_config_field_can_be_an_axis_or_a_fixed_setting():
    for name, field in RunConfig.model_fields.items():
        if name == "out":
            continue
        value = RunConfig().model_dump(mode="json")[name]
        fixed_runs = expand(parse_sweep(yaml.safe_dump({"fixed": {name: value}}), "s"))
        axis_runs = expand(parse_sweep(yaml.safe_dump({"matrix": {name: [value]}}), "s"))
        assert len(fixed_runs) == len(axis_runs) == 1, name
        assert fixed_runs[0].key == axis_runs[0].key, name
        assert getattr(axis_runs[0].config, name) == field.get_default(call_default_factory=True), name


def test_identity_excludes_the_results_folder_but_not_what_is_measured_or_the_placement():
    config = RunConfig(model="pi0-tiny")
    assert run_key(config, None) == run_key(config.model_copy(update={"out": Path("elsewhere")}), None)
    assert run_key(config, None) != run_key(config.model_copy(update={"min_iterations": 11}), None)
    assert run_key(config, None) != run_key(config, "fake-a")
    runs = expand(
        parse_sweep(yaml.safe_dump({"matrix": {"device": [{"name": "cpu", "placement": "fake-a"}, "cpu"]}}), "s")
    )
    assert [(r.config.device, r.placement, r.resource) for r in runs] == [
        ("cpu", "fake-a", "vlabench-device:fake-a"),
        ("cpu", None, "vlabench-device:cpu"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("matrix: {models: [pi0-tiny]}", "unknown setting 'models' .did you mean 'model'"),
        ("fixed: {steps: 3}\nmatrix: {steps: [4]}", "set in both fixed and matrix"),
        ("fixed: {out: x}", "top-level `out`"),
        ("matrix: {steps: []}", "matrix.steps: needs at least one value"),
        ("matrix: {steps: [0]}", r"matrix\.steps value 0: steps: Input should be greater than 0"),
        ("matrix: {dp_cache: [{0,1,2}]}", "matrix.dp_cache value"),
        ("matrix: {backend: ['torch,openvino']}", "a sweep run measures one backend"),
        ("matrix: {device: [{name: cpu, where: x}]}", r"matrix\.device entry: where: Extra inputs"),
        ("exclude: [{}]", "empty rule"),
        ("exclude: [{steps: many}]", r"exclude\[0\]\.steps value 'many'"),
        ("colour: blue", "colour: Extra inputs are not permitted"),
        ("matrix: [1, 2]", "matrix: Input should be a valid dictionary"),
        ("matrix: {steps: [1}", "malformed YAML"),
        ("timeout_s: -1", "timeout_s: Input should be greater than 0"),
    ],
)
def test_malformed_sweep_files_raise_one_clear_input_error(text, message):
    with pytest.raises(InputError, match=message) as caught:
        expand(parse_sweep(text, "bad.yaml"), "bad.yaml")
    assert str(caught.value).startswith("bad.yaml")


def test_sweep_schema_forbids_unknown_top_level_keys():
    assert SweepFile.model_config["extra"] == "forbid"


CRASHER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    mode = os.environ["CRASH_MODE"]
    if mode == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(os.environ["CHILD_PID_FILE"], "w").write(str(child.pid))
        time.sleep(60)
    sys.stderr.write("Traceback ...\\nerror: the replica exploded\\n  and wrapped here\\n")
    sys.exit(3)
    """
)


def alive(pid: int) -> bool:
    """Whether a process still runs, once it had a few seconds to die (a zombie has died)."""
    try:
        process = psutil.Process(pid)
        process.wait(5)
    except psutil.NoSuchProcess:
        return False
    except psutil.TimeoutExpired:
        return process.status() != psutil.STATUS_ZOMBIE
    return False


@pytest.mark.parametrize("mode", ["segfault", "hang", "error"])
def test_a_crashing_hanging_or_failing_child_becomes_a_failed_outcome_with_its_reason(tmp_path, monkeypatch, mode):
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER)
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.setenv("CRASH_MODE", mode)
    monkeypatch.setenv("CHILD_PID_FILE", str(pid_file))
    outcome = Subprocess(timeout_s=3 if mode == "hang" else 60, command=[sys.executable, str(script)]).launch(
        [ConfiguredRun(RunConfig())]
    )
    assert outcome.status == "failed" and outcome.result_texts == []
    if mode == "segfault":
        assert outcome.reason.startswith("killed by SIGSEGV")
    elif mode == "hang":
        assert outcome.reason == "timed out after 3 s (process group killed)"
        assert not alive(int(pid_file.read_text()))
    else:
        assert outcome.reason == "exit code 3: error: the replica exploded and wrapped here"


@pytest.fixture(scope="module")
def tiny_result(fast_run) -> RunResult:
    config = fast_run.config(model="pi0-tiny", device="cpu", min_iterations=3)
    return execute(plan_run(config))


def test_reopening_the_store_finishes_an_interrupted_promotion_and_drops_debris(tiny_result, tmp_path):
    runs = expand(parse_sweep(sweep_yaml({"seed": [1, 2]}), "s"))
    text = tiny_result.model_dump_json()
    with SweepStore(tmp_path) as store:
        done = store.finish(runs[0], LaunchOutcome(status="ok", result_texts=[text], wall_s=1.0, hostname="h"))
        assert store.completed(runs[0].key) == done
        # Simulate a kill between the marker and the rename: the result is back in staging.
        os.replace(tmp_path / done.result, store.staged_path(runs[0].key))
        # And a kill before any marker: a staged file and a temporary file of an atomic write.
        store.staged_path(runs[1].key).write_text(text)
        (store.journal / ".partial-abc.json").write_text("{")
    with SweepStore(tmp_path) as store:
        assert store.completed(runs[0].key) is not None
        assert store.completed(runs[1].key) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [".sweep", done.result]
    assert not list((tmp_path / ".sweep").glob(f"*{STAGED_SUFFIX}"))
    assert not list((tmp_path / ".sweep").glob(".partial-*"))


def test_a_second_sweep_into_the_same_folder_is_refused(tmp_path):
    from vlabench.errors import VlabenchError

    with SweepStore(tmp_path), pytest.raises(VlabenchError, match="another sweep is writing"), SweepStore(tmp_path):
        pass


def test_an_unreadable_result_from_a_child_is_a_failed_run(tmp_path):
    run = expand(parse_sweep(sweep_yaml({}), "s"))[0]
    with SweepStore(tmp_path) as store:
        record = store.finish(run, LaunchOutcome(status="ok", result_texts=['{"x": 1}'], wall_s=1.0, hostname="h"))
    assert record.status == "failed" and record.reason.startswith("the run returned an invalid result")
    assert [p.name for p in tmp_path.iterdir()] == [".sweep"]


def run_sweep_cli(path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "vlabench", "sweep", str(path), "--out", str(out), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_sweep_runs_each_config_in_a_child_records_failures_and_resumes(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(sweep_yaml({"model": ["smolvla-tiny"], "backend": ["torch", "no-such-backend"]}))
    out = tmp_path / "results"
    first = run_sweep_cli(sweep, out)
    assert first.returncode == 7, first.stderr
    assert "1 ok, 0 invalid, 1 failed, 0 skipped" in first.stdout
    loaded, skipped = load_results([out])
    assert skipped == [] and [result.backend for _, result in loaded] == ["torch"]
    records = [RunRecord.model_validate_json(p.read_text()) for p in (out / ".sweep").glob("*.sweep.json")]
    failed = next(r for r in records if r.status == "failed")
    assert failed.exit_code == 2 and "Unknown backend 'no-such-backend'" in failed.reason
    second = run_sweep_cli(sweep, out)
    assert second.returncode == 7
    assert "0 ok, 0 invalid, 1 failed, 1 skipped" in second.stdout
    assert len(load_results([out])[0]) == 1
    dry = subprocess.run(
        [sys.executable, "-m", "vlabench", "sweep", str(sweep), "--out", str(out), "--dry-run"],
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0 and "2 runs (1 already done)" in dry.stdout


def test_sigkill_at_random_points_then_resume_leaves_exactly_the_expected_results(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(sweep_yaml({"model": ["smolvla-tiny"], "seed": [0, 1]}))
    out = tmp_path / "results"
    expected = {run.config.seed for run in expand(parse_sweep(sweep.read_text(), "s"))}
    rng = random.Random(9)
    command = [sys.executable, "-m", "vlabench", "sweep", str(sweep), "--out", str(out)]
    for _ in range(2):
        driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(2.0, 12.0))
        children = psutil.Process(driver.pid).children(recursive=True)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        assert not [child.pid for child in children if alive(child.pid)]
    final = run_sweep_cli(sweep, out)
    assert final.returncode == 0, final.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.startswith(".partial-") or p.name.endswith(STAGED_SUFFIX)]
    for path in files:
        if path.suffix == ".json":
            json.loads(path.read_text())
    loaded, skipped = load_results([out])
    assert skipped == []
    assert sorted(result.config.seed for _, result in loaded) == sorted(expected)
    assert all(load_result(path).config.model == "smolvla-tiny" for path, _ in loaded)


def _write_copies(source: str, out: str, count: int, worker: int) -> None:
    result = RunResult.model_validate_json(source)
    for i in range(count):
        write_result(result.model_copy(update={"run_id": f"{worker:04d}{i:04d}" + "0" * 24}), Path(out))


def test_concurrent_writers_into_one_results_folder_do_not_corrupt_it(tiny_result, tmp_path):
    source, writers, each = tiny_result.model_dump_json(), 4, 25
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_write_copies, args=(source, str(tmp_path), each, w)) for w in range(writers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    loaded, skipped = load_results([tmp_path])
    assert skipped == [] and len(loaded) == writers * each
    assert len({result.run_id for _, result in loaded}) == writers * each
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_local_dispatch_skips_completed_runs_without_starting_a_child(tiny_result, tmp_path):
    runs = expand(parse_sweep(sweep_yaml({"seed": [5]}), "s"))
    with SweepStore(tmp_path) as store:
        store.finish(
            runs[0], LaunchOutcome(status="ok", result_texts=[tiny_result.model_dump_json()], wall_s=2, hostname="h")
        )
    started = []
    records = execute_sweep(runs, tmp_path, run_locally(tmp_path, 1, command=["false"]), started.append)
    assert started == [] and [r.status for r in records] == ["skipped"]


def test_worker_line_advertises_this_hosts_profiles_the_cpu_alias_and_extra_labels(monkeypatch):
    import vlabench.fleet.worker as worker

    monkeypatch.setattr(worker, "detected_device_names", lambda: ["generic-x86-cpu", "cpu"])
    listed = CliRunner().invoke(app, ["worker", "--address", "10.0.0.1:6379", "--placement", "lab-1", "--json"])
    assert listed.exit_code == 0
    payload = json.loads(listed.stdout)
    assert payload["resources"] == {
        "vlabench-device:generic-x86-cpu": 1,
        "vlabench-device:cpu": 1,
        "vlabench-device:lab-1": 1,
    }
    assert payload["command"][:4] == ["ray", "start", "--address", "10.0.0.1:6379"]
    head = CliRunner().invoke(app, ["worker", "--no-detect", "--placement", "fake-a", "--num-cpus", "1"])
    expected = """ray start --head --port 6379 --num-cpus 1 --resources '{"vlabench-device:fake-a":1}'"""
    assert head.stdout.strip() == expected
    bad = CliRunner().invoke(app, ["worker", "--no-detect", "--placement", "a b"])
    assert bad.exit_code == 2 and "invalid placement label" in bad.stderr
