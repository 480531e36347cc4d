"""Faults that must not lose work or hang: a full disk when the result is written (it goes to a fallback file, or
to stderr, and the run says where, exit 1), an unusable --out or --energy-log (refused before any model is built),
the debris of killed writers and killed sweeps (removed on the next start), a redo killed after staging (resume
never files a result under another run's name), a sweep matrix of billions of runs (refused at once, also with
--dry-run), a Ray address that does not answer (refused with a message, not a hang), and a backend that crashes
natively in a multi-backend run (named with its signal; the other backends' results are still written)."""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.support.paths import LEGACY_RUN
from vlabench.atomic import WriteError, atomic_write_json, atomic_write_text, remove_stale, unsaved_path
from vlabench.backends import BACKENDS
from vlabench.backends.torch.backend import TorchBackend, TorchPolicy
from vlabench.cli.app import app
from vlabench.commands.run import ConfiguredRun, Subprocess, save_result
from vlabench.commands.run.subprocess_launcher import ORPHANED_EXIT_CODE, die_with_parent
from vlabench.config import RunConfig
from vlabench.errors import InputError, UnavailableError, VlabenchError
from vlabench.fleet.local_runner import STAGED_SUFFIX, SweepStore
from vlabench.fleet.ray_dispatch import probe_address
from vlabench.fleet.sweep_file import expand, parse_sweep
from vlabench.results.launch_outcome import LaunchOutcome
from vlabench.results.schema import RunResult, load_result, write_result

runner = CliRunner()


@pytest.fixture(scope="module")
def result() -> RunResult:
    return load_result(LEGACY_RUN)


def vlabench(*arguments: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vlabench", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **env},
    )


# ---- a full disk when the result is written ---------------------------------------------------------------------


def full_disk_under(monkeypatch, *folders: Path) -> None:
    """fsync of any file in ``folders`` fails as on a full disk (ENOSPC)."""
    real = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if any(folder in path.parents for folder in folders):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_failed_write_raises_a_write_error_with_its_errno_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    full_disk_under(monkeypatch, tmp_path)
    with pytest.raises(WriteError, match="No space left on device") as raised:
        atomic_write_text(tmp_path / "result.json", "{}")
    assert raised.value.errno == errno.ENOSPC and raised.value.exit_code == 1
    assert list(tmp_path.iterdir()) == []


def test_a_result_that_cannot_be_written_goes_to_the_fallback_file(result, tmp_path, monkeypatch):
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    full_disk_under(monkeypatch, tmp_path / "out")
    saved = save_result(result, tmp_path / "out")
    assert saved.problem and "No space left on device" in saved.problem
    assert saved.path == unsaved_path(f"{result.run_id}.json") == spare / f"vlabench-unsaved-{result.run_id}.json"
    assert load_result(saved.path) == result


def test_when_the_fallback_fails_too_the_result_text_is_kept_for_stderr(result, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "spare"))
    full_disk_under(monkeypatch, tmp_path)
    saved = save_result(result, tmp_path / "out")
    assert saved.path is None and saved.problem
    assert RunResult.model_validate_json(saved.text) == result


def json_block(text: str) -> dict:
    """The JSON document printed on its own lines ({ ... }) in ``text``."""
    lines = text.splitlines()
    start = lines.index("{")
    end = next(i for i in range(len(lines) - 1, start, -1) if lines[i] == "}")
    return json.loads("\n".join(lines[start : end + 1]))


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs filled to 8 KiB free: the probe of --out fits, a 20 KiB result does not."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        (mount / "filler").write_bytes(b"\0" * (56 * 1024))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_at_the_end_of_a_real_run_keeps_the_measurement(fast_run, tiny_disk, tmp_path):
    spare = tmp_path / "spare"
    spare.mkdir()
    out = tiny_disk / "results"
    first = vlabench("run", "-m", "smolvla-tiny", "-d", "cpu", *fast_run.args(), "-o", str(out), TMPDIR=str(spare))
    assert first.returncode == 1, first.stderr
    saved = list(spare.glob("vlabench-unsaved-*.json"))
    assert len(saved) == 1 and load_result(saved[0]).model.name == "smolvla-tiny"
    message = " ".join(first.stderr.split())
    assert "No space left on device" in message and str(saved[0]) in message and "not lost" in message
    assert "Traceback" not in first.stderr
    assert [p.name for p in out.iterdir()] == []  # no partial file on the full disk either
    # The fallback on the same full disk: the JSON goes to stderr, the run still says so.
    second = vlabench("run", "-m", "smolvla-tiny", "-d", "cpu", *fast_run.args(), "-o", str(out), TMPDIR=str(tiny_disk))
    assert second.returncode == 1, second.stderr
    assert json_block(second.stderr)["model"]["name"] == "smolvla-tiny"
    assert "stderr above" in " ".join(second.stderr.split()) and "Traceback" not in second.stderr


def test_a_full_disk_while_a_sweep_promotes_a_result_says_where_it_went(result, tmp_path, monkeypatch):
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    run = expand(parse_sweep(yaml.safe_dump({"matrix": {"seed": [1]}}), "s"))[0]
    outcome = LaunchOutcome(status="ok", result_texts=[result.model_dump_json()], wall_s=1.0, hostname="h")
    with SweepStore(tmp_path / "out") as store:
        full_disk_under(monkeypatch, tmp_path / "out")
        with pytest.raises(WriteError, match=f"saved to {spare / ('vlabench-unsaved-' + result.run_id)}"):
            store.finish(run, outcome)
    assert load_result(spare / f"vlabench-unsaved-{result.run_id}.json") == result


# ---- unusable --out and --energy-log are refused before any work -----------------------------------------------


@pytest.fixture
def no_model(monkeypatch):
    """Fail loudly if a run gets as far as loading the model."""

    def refuse(name: str):
        raise AssertionError(f"the model {name} was loaded before the paths were checked")

    monkeypatch.setattr("vlabench.commands.run.plan.load_model_spec", refuse)


@pytest.mark.parametrize("where", ["file/sub", "file"])
@pytest.mark.parametrize("backend", ["torch", "all"])
def test_an_unwritable_out_is_refused_before_the_model_is_built(fast_run, tmp_path, no_model, where, backend):
    (tmp_path / "file").write_text("a file where the results folder should be")
    out = tmp_path / where
    refused = runner.invoke(
        app, ["run", "-m", "smolvla-tiny", "-d", "cpu", *fast_run.args(), "-b", backend, "-o", str(out)]
    )
    assert refused.exit_code == 2, refused.output
    assert f"--out {out}: cannot write a result there" in " ".join(refused.output.split())


@pytest.mark.parametrize("command", [["run"], ["profile"], ["loop"]])
def test_every_measuring_command_checks_out_first(tmp_path, no_model, command):
    (tmp_path / "file").write_text("")
    refused = runner.invoke(app, [*command, "-m", "smolvla-tiny", "-o", str(tmp_path / "file" / "sub")])
    assert refused.exit_code == 2 and "cannot write a result there" in refused.output, refused.output


@pytest.mark.parametrize(("log", "code"), [("missing.csv", 3), ("folder", 2)])
def test_an_unreadable_energy_log_is_refused_before_the_model_is_built(fast_run, tmp_path, no_model, log, code):
    (tmp_path / "folder").mkdir()
    refused = runner.invoke(
        app,
        [
            "run",
            "-m",
            "smolvla-tiny",
            *fast_run.args(energy_meter=None, threads=None),
            "-b",
            "all",
            "--energy-log",
            str(tmp_path / log),
        ],
    )
    assert refused.exit_code == code, refused.output
    assert log in refused.output


@pytest.mark.parametrize(
    ("command", "never"),
    [
        (["fidelity", "--observations", "1", "--no-closed-loop"], "vlabench.commands.fidelity.plan_target"),
        (["roofline", "-d", "rtx-4090"], "vlabench.commands.roofline.load_model_spec"),
    ],
)
def test_analysis_outputs_are_checked_before_the_work(tmp_path, monkeypatch, command, never):
    """fidelity --out and roofline --out into a path no file can be written to: refused (exit 2) before any model is
    built, not after the work."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"{never} ran before --out was checked")

    monkeypatch.setattr(never, refuse)
    (tmp_path / "file").write_text("")
    refused = runner.invoke(app, [*command, "-m", "smolvla-tiny", "-o", str(tmp_path / "file" / "sub")])
    assert refused.exit_code == 2, refused.output
    assert f"--out {tmp_path / 'file' / 'sub'}: cannot write" in " ".join(refused.output.split())


def test_project_and_site_build_outputs_are_checked_before_the_work(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr("vlabench.commands.project.run_project", lambda *a: pytest.fail("projected before --out"))
    projected = runner.invoke(app, ["project", "-m", "smolvla", "-o", str(tmp_path / "file" / "p.json")])
    assert projected.exit_code == 2 and "cannot write a projection there" in projected.output
    monkeypatch.setattr("vlabench.leaderboard_site.build.load_board", lambda *a, **k: pytest.fail("read before -o"))
    built = runner.invoke(app, ["site", "build", str(tmp_path), "-o", str(tmp_path / "file" / "site")])
    assert built.exit_code == 2 and "cannot write a site there" in built.output


def test_a_full_disk_under_site_build_is_one_clear_error_and_no_half_site(tiny_disk, tmp_path, result):
    """The site's assets do not fit the 8 KiB left: exit 1 with the reason, no traceback, no staging folder left."""
    folder = tmp_path / "results"
    save = write_result(result, folder)
    built = runner.invoke(app, ["site", "build", str(save), "-o", str(tiny_disk / "site"), "--no-projected"])
    assert built.exit_code == 1, built.output
    said = " ".join(built.stderr.split())
    assert "cannot write the site into" in said and "No space left on device" in said
    assert isinstance(built.exception, SystemExit)  # the CLI's clear exit, no traceback
    assert sorted(path.name for path in tiny_disk.iterdir()) == ["filler"]


def test_a_site_built_inside_its_results_folder_is_not_read_back_as_results(result, tmp_path):
    """``site build RESULTS -o RESULTS/site`` twice: the second build reads the one result, not the first build's
    copy of it (nor its downloads); rank and compare pass over the site too."""
    folder = tmp_path / "results"
    write_result(result, folder)
    for _ in range(2):
        built = runner.invoke(app, ["site", "build", str(folder), "-o", str(folder / "site"), "--no-projected"])
        assert built.exit_code == 0, built.output
        assert "skipped" not in built.stderr
    marker = json.loads((folder / "site" / "vlabench-site.json").read_text())
    assert marker["runs"] == 1 and marker["skipped"] == []
    assert list((folder / "site").rglob(f"*{result.run_id[:8]}*.json")), "the site holds a copy of the result"
    ranked = json.loads(runner.invoke(app, ["rank", str(folder), "--json"]).stdout)
    assert len(ranked) == 1


# ---- debris of killed writers and killed sweeps ----------------------------------------------------------------

KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from vlabench.atomic import atomic_write_text
    def stuck(fd):
        print("writing", flush=True)
        time.sleep(60)
    os.fsync = stuck
    atomic_write_text(Path(sys.argv[1]) / "result.json", "{}")
    """
)


def kill_mid_write(folder: Path) -> int:
    """A child killed (SIGKILL) while its atomic write is in progress; its pid."""
    process = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "writing"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return process.pid


def test_the_next_run_removes_partial_files_of_killed_writers_only(tmp_path):
    out = tmp_path / "results"
    pid = kill_mid_write(out)
    [debris] = out.glob(".partial-*")
    assert debris.name.startswith(f".partial-{pid}-")
    live = out / f".partial-{os.getpid()}-writing.json"  # a writer that is still running
    live.write_text("{")
    ancient = out / ".partial-abcd1234.json"  # an older version's name, two hours old
    ancient.write_text("{")
    os.utime(ancient, (time.time() - 7200, time.time() - 7200))
    # The run fails after its early checks (no power log): what matters is what it removed on the way.
    refused = vlabench("run", "-m", "smolvla-tiny", "-o", str(out), "--energy-log", str(tmp_path / "none.csv"))
    assert refused.returncode == 3, refused.stderr
    assert sorted(p.name for p in out.iterdir()) == [live.name]


def test_a_sweep_removes_partial_files_of_killed_writers_in_its_results_folder(tmp_path):
    kill_mid_write(tmp_path)
    with SweepStore(tmp_path):
        pass
    assert not list(tmp_path.glob(".partial-*"))


KILLED_SWEEP = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import yaml
    from vlabench.fleet.local_runner import execute_sweep, run_locally
    from vlabench.fleet.sweep_file import expand, parse_sweep
    runs = expand(parse_sweep(yaml.safe_dump({"matrix": {"seed": [1]}}), "s"))
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    out = Path(sys.argv[1])
    execute_sweep(runs, out, run_locally(out, None, hang))
    """
)


def test_a_killed_sweeps_work_folders_stay_in_its_journal_and_go_at_the_next_start(tmp_path):
    out, system_tmp = tmp_path / "results", tmp_path / "tmp"
    system_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(system_tmp)}
    sweep = subprocess.Popen([sys.executable, "-c", KILLED_SWEEP, str(out)], env=env)
    scratch = out / ".sweep" / "tmp"
    for _ in range(600):  # until its first run's work folder exists (a hang guard of 600 polls, not a timing claim)
        if scratch.is_dir() and any(scratch.glob("*/run.yaml")):
            break
        assert sweep.poll() is None, "the sweep ended before it started a run"
        time.sleep(0.2)
    else:
        pytest.fail("the sweep never started a run")
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.wait()
    assert list(system_tmp.iterdir()) == []  # nothing of the sweep outside its results folder
    assert len(list(scratch.iterdir())) == 1
    with SweepStore(out):
        assert list(scratch.iterdir()) == []


FORKED_HOLDER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from vlabench.fleet.local_runner import SweepStore
    store = SweepStore(Path(sys.argv[1])).__enter__()
    child = os.fork()
    if child == 0:  # a child caught between fork and exec when its sweep dies: it still has the lock's descriptor
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)  # the test's pipes close when its parent dies
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)
    os.kill(os.getpid(), 9)
    """
)


def test_a_child_forked_by_a_killed_sweep_does_not_keep_its_folder_locked(tmp_path):
    killed = subprocess.run([sys.executable, "-c", FORKED_HOLDER, str(tmp_path)], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    child = int(killed.stdout)
    try:
        os.kill(child, 0)  # the forked child outlives its sweep
        with SweepStore(tmp_path) as store:
            assert store.journal.is_dir()
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_refused_second_store_in_one_process_leaves_the_first_locked_against_others(tmp_path):
    other = "import sys, pathlib; from vlabench.fleet.local_runner import SweepStore as S; "
    other += "S(pathlib.Path(sys.argv[1])).__enter__()"
    with SweepStore(tmp_path):
        with pytest.raises(VlabenchError, match="another sweep is writing"), SweepStore(tmp_path):
            pass
        refused = subprocess.run([sys.executable, "-c", other, str(tmp_path)], capture_output=True, text=True)
        assert refused.returncode != 0 and "another sweep is writing" in refused.stderr
    with SweepStore(tmp_path):  # released on exit
        pass


def test_a_child_whose_launcher_died_before_it_armed_the_death_signal_never_runs_its_command(tmp_path):
    ran = tmp_path / "ran"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    child = subprocess.Popen(
        [sys.executable, "-c", f"open({str(ran)!r}, 'w').close()"],
        preexec_fn=functools.partial(die_with_parent, int(gone.stdout)),  # as if that launcher had died
    )
    assert child.wait() == ORPHANED_EXIT_CODE
    assert not ran.exists()
    mine = subprocess.Popen(
        [sys.executable, "-c", f"open({str(ran)!r}, 'w').close()"],
        preexec_fn=functools.partial(die_with_parent, os.getpid()),
    )
    assert mine.wait() == 0 and ran.exists()


def test_a_work_folder_of_a_killed_remote_run_is_removed_from_the_system_temp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"vlabench-sweep-{int(gone.stdout)}-abcdefgh"
    stale.mkdir()
    (stale / "run.yaml").write_text("{}")
    mine = tmp_path / f"vlabench-sweep-{os.getpid()}-running"
    mine.mkdir()
    outcome = Subprocess(30, [sys.executable, "-c", "pass"]).launch([ConfiguredRun(RunConfig())])
    assert outcome.status == "failed"  # no result file: what matters is the cleanup
    assert sorted(p.name for p in tmp_path.iterdir()) == [mine.name]


def test_remove_stale_skips_names_without_a_writer_and_young_files(tmp_path):
    (tmp_path / ".partial-12345678").write_text("")  # mkstemp letters only: no pid to read
    (tmp_path / "result.json").write_text("{}")
    assert remove_stale(tmp_path) == []


# ---- a redo killed after staging -------------------------------------------------------------------------------

KILLED_AFTER_STAGING = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import yaml
    import vlabench.fleet.local_runner as runner
    from vlabench.fleet.sweep_file import expand, parse_sweep
    from vlabench.results.launch_outcome import LaunchOutcome
    out, text = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
    run = expand(parse_sweep(yaml.safe_dump({"matrix": {"seed": [1]}}), "s"))[0]
    write = runner.atomic_write_text
    def crash_after_staging(target, data):
        written = write(target, data)
        if target.name.endswith(runner.STAGED_SUFFIX):
            os.kill(os.getpid(), signal.SIGKILL)
        return written
    runner.atomic_write_text = crash_after_staging
    with runner.SweepStore(out) as store:
        store.finish(run, LaunchOutcome(status="ok", result_texts=[text], wall_s=1.0, hostname="h"))
    """
)


def test_a_redo_killed_after_staging_is_never_filed_under_the_deleted_results_name(result, tmp_path):
    out = tmp_path / "results"
    run = expand(parse_sweep(yaml.safe_dump({"matrix": {"seed": [1]}}), "s"))[0]
    with SweepStore(out) as store:
        first = store.finish(
            run, LaunchOutcome(status="ok", result_texts=[result.model_dump_json()], wall_s=1, hostname="h")
        )
    (out / first.result).unlink()  # the user deletes the result: the next sweep redoes the run
    redo = result.model_copy(update={"run_id": "f" * 32})
    assert redo.file_name() != first.result
    (tmp_path / "redo.json").write_text(redo.model_dump_json())
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_STAGING, str(out), str(tmp_path / "redo.json")], timeout=120
    )
    assert killed.returncode == -signal.SIGKILL
    assert list((out / ".sweep").glob(f"*{STAGED_SUFFIX}"))
    with SweepStore(out) as store:  # resume
        assert store.completed(run.key) is None  # the redo's marker never landed: the run is redone
    assert not list((out / ".sweep").glob(f"*{STAGED_SUFFIX}"))
    for path in out.glob("*.json"):
        assert load_result(path).file_name() == path.name, f"{path.name} holds another run"


# ---- a sweep matrix of billions and an unreachable Ray address --------------------------------------------------


def test_a_matrix_of_billions_of_runs_is_refused_at_once_also_with_dry_run(tmp_path):
    matrix = {
        "seed": list(range(99)),
        "warmup": list(range(99)),
        "min_iterations": list(range(1, 100)),
        "control_hz": list(range(1, 100)),
        "energy_window_s": list(range(1, 100)),
    }
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"matrix": matrix}))
    dry = vlabench("sweep", str(sweep), "--out", str(tmp_path / "out"), "--dry-run", timeout=60)  # never enumerated
    assert dry.returncode == 2, dry.stderr
    message = " ".join(dry.stderr.split())
    assert "9,509,900,499 runs" in message and "at most 10,000" in message
    with pytest.raises(InputError, match="expands to 10,100 runs"):
        expand(parse_sweep(yaml.safe_dump({"matrix": {"seed": list(range(101)), "warmup": list(range(100))}}), "s"))
    assert len(expand(parse_sweep(yaml.safe_dump({"matrix": {"seed": list(range(100))}}), "s"))) == 100


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_ray_address_is_refused_with_a_message_not_a_hang(tmp_path):
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(UnavailableError, match=f"cannot reach the Ray cluster at {address}"):
        probe_address(address)
    with pytest.raises(InputError, match="expected HOST:PORT"):
        probe_address("no-port-here")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"fixed": {"model": "smolvla-tiny"}, "matrix": {"seed": [1]}}))
    refused = vlabench("sweep", str(sweep), "--out", str(tmp_path / "out"), "--ray", address, timeout=60)
    assert refused.returncode == 3, refused.stderr
    assert f"cannot reach the Ray cluster at {address}" in " ".join(refused.stderr.split())


# ---- a backend that crashes natively does not take a multi-backend run down with it ------------------------------


class CrashingBackend(TorchBackend):
    """Eager torch whose runtime dies natively (a read of address 0: SIGSEGV) in the middle of the timed iterations."""

    name = "crashing"

    def prepare(self, *args, **kwargs) -> TorchPolicy:
        return CrashingPolicy(super().prepare(*args, **kwargs))


class CrashingPolicy(TorchPolicy):
    def __init__(self, inner: TorchPolicy) -> None:
        super().__init__(inner.model, inner.device)
        self.calls = 0

    def denoise_step(self, *args, **kwargs):
        self.calls += 1
        if self.calls > 20:  # past the warm-up: the crash comes while the backends are timed, interleaved
            ctypes.string_at(0)
        return super().denoise_step(*args, **kwargs)


def test_a_backend_crashing_natively_is_named_and_the_other_backends_results_are_written(
    fast_run, tmp_path, monkeypatch
):
    monkeypatch.setitem(BACKENDS, "crashing", CrashingBackend)
    result = runner.invoke(
        app, ["run", "-m", "smolvla-tiny", "-d", "cpu", *fast_run.args(), "-b", "torch,crashing", "-o", str(tmp_path)]
    )
    message = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert f"backend 'crashing' (fp32) died from SIGSEGV (signal {signal.SIGSEGV.value})" in message
    assert "the other backends' results are saved (1)" in message
    written = [load_result(path) for path in tmp_path.glob("*.json")]
    assert [r.backend for r in written] == ["torch"]
    assert any("after the process shared by 2 backends died from SIGSEGV" in w for w in written[0].warnings)


def test_a_json_document_with_a_nan_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="not JSON compliant"):
        atomic_write_json(tmp_path / "artifact.json", {"p50_ms": float("nan")})
    assert list(tmp_path.iterdir()) == []
    atomic_write_json(tmp_path / "artifact.json", {"p50_ms": 1.5})
    assert (tmp_path / "artifact.json").read_text() == '{\n  "p50_ms": 1.5\n}\n'


def test_a_cache_folder_published_twice_keeps_the_first_and_drops_the_second(tmp_path):
    """Two processes filling the same cache entry (two test workers, two sweeps): the second finds the first's
    complete folder, uses it and removes its own staging folder; an incomplete folder in the way is an error."""
    from vlabench.atomic import publish_folder, staging_folder

    target = tmp_path / "entry"
    first, second = staging_folder(tmp_path, ".partial-"), staging_folder(tmp_path, ".partial-")
    for folder, text in ((first, "first"), (second, "second")):
        (folder / "meta.json").write_text(text)
        (folder / "graph.onnx").write_text(text)
    assert publish_folder(first, target) is True
    assert publish_folder(second, target) is False
    assert (target / "graph.onnx").read_text() == "first" and not second.exists()
    (target / "meta.json").unlink()
    third = staging_folder(tmp_path, ".partial-")
    (third / "meta.json").write_text("third")
    with pytest.raises(OSError):
        publish_folder(third, target)
