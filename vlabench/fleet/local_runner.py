"""Executing a sweep: each run in a child process, results promoted into the results folder with a journal that
makes the sweep resumable after any crash (even SIGKILL) without partial or duplicate results."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from vlabench.atomic import WriteError, atomic_write_text, owned_prefix, remove_stale, rescue_text
from vlabench.config import RunConfig
from vlabench.errors import VlabenchError
from vlabench.fleet.sweep_file import SweepRun
from vlabench.results.sweep_record import MARKER_SUFFIX, ChildOutcome, RunRecord

JOURNAL_DIR = ".sweep"
SCRATCH_DIR = "tmp"
"""``<out>/.sweep/tmp/``: each run's config, stderr and results folder while it runs (emptied when a sweep opens)."""
CHILD_PREFIX = "vlabench-sweep-"
STAGED_SUFFIX = ".staged"
EXIT_INVALID = 5
PR_SET_PDEATHSIG = 1
STDERR_TAIL_CHARS = 4000


def _die_with_parent() -> None:
    """In the child (Linux): receive SIGKILL when the sweep process dies, so no orphan keeps running."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _failure_reason(code: int, stderr: str) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("error:")]
    detail = " ".join(lines[starts[-1] :]) if starts else (lines[-1] if lines else "no output")
    return f"exit code {code}: {detail}"


def run_subprocess(
    config: RunConfig, timeout_s: float | None, command: Sequence[str] | None = None, scratch: Path | None = None
) -> ChildOutcome:
    """Run one benchmark as ``python3 -m vlabench run --config <per-run yaml>`` in its own process group; a crash,
    a non-zero exit or the timeout (the whole group is killed) becomes a failed outcome with its reason. Its work
    folder is made in ``scratch`` (default: the system's temporary folder, where those of killed processes are
    removed first)."""
    started = time.monotonic()
    started_utc = datetime.now(timezone.utc)
    if scratch is None:
        scratch = Path(tempfile.gettempdir())
        remove_stale(scratch, CHILD_PREFIX)
    with tempfile.TemporaryDirectory(prefix=owned_prefix(CHILD_PREFIX), dir=scratch) as temporary:
        work = Path(temporary)
        settings = config.model_copy(update={"out": work / "out"}).model_dump(mode="json")
        (work / "run.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        argv = [*(command or (sys.executable, "-m", "vlabench", "run")), "--config", str(work / "run.yaml")]
        with open(work / "stderr.log", "wb") as stderr:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            try:
                code = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                reason = f"timed out after {timeout_s:g} s (process group killed)"
                return _outcome("failed", started, started_utc, reason=reason)
            except BaseException:
                _kill_group(process)
                raise
        produced = sorted((work / "out").glob("*.json"))
        if code in (0, EXIT_INVALID) and len(produced) == 1:
            status = "ok" if code == 0 else "invalid"
            return _outcome(status, started, started_utc, result_text=produced[0].read_text(), exit_code=code)
        tail = (work / "stderr.log").read_text(errors="replace")[-STDERR_TAIL_CHARS:]
        reason = _failure_reason(code, tail) if code else f"exit code 0 but {len(produced)} result files"
        return _outcome("failed", started, started_utc, reason=reason, exit_code=code)


def _outcome(status: str, started: float, started_utc: datetime, **fields: Any) -> ChildOutcome:
    wall_s = time.monotonic() - started
    return ChildOutcome(status=status, wall_s=wall_s, hostname=socket.gethostname(), started_utc=started_utc, **fields)


class SweepStore:
    """The results folder plus the sweep journal in ``<out>/.sweep/``, held under an exclusive lock.

    A result lands in three atomic steps: staged into the journal folder, the run's marker (naming the result file)
    written, then the staged file renamed into the results folder. Whatever step a crash interrupts, reopening the
    store either finishes the rename (marker present) or discards the staged file (run redone): never a partial
    result, never a duplicate."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.journal = out / JOURNAL_DIR
        self.scratch = self.journal / SCRATCH_DIR
        self._lock: int | None = None

    def __enter__(self) -> SweepStore:
        try:
            self.journal.mkdir(parents=True, exist_ok=True)
            self._lock = os.open(self.journal / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise VlabenchError(f"cannot write to {self.out}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise VlabenchError(f"another sweep is writing into {self.out}; wait for it or use another --out") from None
        self._recover()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            os.close(self._lock)

    def marker_path(self, key: str) -> Path:
        return self.journal / f"{key}{MARKER_SUFFIX}"

    def staged_path(self, key: str) -> Path:
        return self.journal / f"{key}{STAGED_SUFFIX}"

    def _recover(self) -> None:
        """Finish interrupted promotions, then drop staged and temporary files left by a killed sweep: the work
        folders of its runs, and the temporary files of atomic writes (in the results folder: those whose writer
        is gone; a ``vlabench run`` may be writing there)."""
        for staged in self.journal.glob(f"*{STAGED_SUFFIX}"):
            record = self.record(staged.name.removesuffix(STAGED_SUFFIX))
            if record and record.result and record.status in ("ok", "invalid") and record.result == _name(staged):
                os.replace(staged, self.out / record.result)
            else:  # no marker yet, or the marker of an earlier run of the key (whose result was deleted)
                staged.unlink()
        for partial in self.journal.glob(".partial-*"):
            partial.unlink()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch.mkdir(exist_ok=True)
        remove_stale(self.out)

    def record(self, key: str) -> RunRecord | None:
        path = self.marker_path(key)
        try:
            return RunRecord.model_validate_json(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError, UnicodeDecodeError):
            path.unlink(missing_ok=True)
            return None

    def completed(self, key: str) -> RunRecord | None:
        """The run's record when it finished (ok or invalid) and its result file is in the results folder."""
        record = self.record(key)
        if record and record.status in ("ok", "invalid") and record.result and (self.out / record.result).is_file():
            return record
        return None

    def finish(self, run: SweepRun, outcome: ChildOutcome) -> RunRecord:
        """Journal a run's outcome; a result is validated, then promoted into the results folder."""
        from vlabench.results.schema import RunResult

        finished = datetime.now(timezone.utc)
        fields: dict[str, Any] = {
            "key": run.key,
            "label": run.label,
            "status": outcome.status,
            "reason": outcome.reason,
            "exit_code": outcome.exit_code,
            "wall_s": outcome.wall_s,
            "placement": run.placement,
            "hostname": outcome.hostname,
            "node_id": outcome.node_id,
            "started_utc": outcome.started_utc or finished - timedelta(seconds=outcome.wall_s),
            "finished_utc": finished,
            "config": run.config.model_dump(mode="json"),
        }
        if outcome.status == "failed" or outcome.result_text is None:
            record = RunRecord(**{**fields, "status": "failed"})
            atomic_write_text(self.marker_path(run.key), record.model_dump_json(indent=2))
            return record
        try:
            result = RunResult.model_validate_json(outcome.result_text)
        except ValidationError as exc:
            reason = f"the run returned an invalid result: {exc.errors()[0]['msg']}"
            record = RunRecord(**{**fields, "status": "failed", "reason": reason})
            atomic_write_text(self.marker_path(run.key), record.model_dump_json(indent=2))
            return record
        record = RunRecord(**fields, result=result.file_name(), e2e_p50_ms=result.timing.phases["e2e"].p50)
        try:
            staged = atomic_write_text(self.staged_path(run.key), outcome.result_text)
        except WriteError as exc:  # a full disk: keep the measurement elsewhere, say where, stop the sweep
            rescued = rescue_text(outcome.result_text, f"{result.run_id}.json")
            if rescued is None:
                sys.stderr.write(outcome.result_text + "\n")
            kept = f"saved to {rescued}" if rescued else "printed above on stderr (the fallback file failed too)"
            raise WriteError(f"{exc}; the result of {run.label} is {kept}", exc.errno) from None
        atomic_write_text(self.marker_path(run.key), record.model_dump_json(indent=2))
        os.replace(staged, self.out / record.result)
        return record


def _name(staged: Path) -> str | None:
    """The file name a staged result's own contents give it (None: unreadable)."""
    from vlabench.results.schema import RunResult

    try:
        return RunResult.model_validate_json(staged.read_text()).file_name()
    except (OSError, ValidationError, UnicodeDecodeError):
        return None


Dispatch = Callable[[list[SweepRun], SweepStore, Callable[[SweepRun], None], Callable[[RunRecord], None]], None]


def run_locally(timeout_s: float | None, command: Sequence[str] | None = None) -> Dispatch:
    """A dispatcher that runs the pending runs one after another on this host."""

    def dispatch(
        runs: list[SweepRun],
        store: SweepStore,
        started: Callable[[SweepRun], None],
        finished: Callable[[RunRecord], None],
    ) -> None:
        for run in runs:
            started(run)
            finished(store.finish(run, run_subprocess(run.config, timeout_s, command, store.scratch)))

    return dispatch


def execute_sweep(
    runs: list[SweepRun],
    out: Path,
    dispatch: Dispatch,
    started: Callable[[SweepRun], None] = lambda run: None,
    finished: Callable[[RunRecord], None] = lambda record: None,
) -> list[RunRecord]:
    """Skip the runs already completed in ``out``, dispatch the others; one record per run, in sweep order."""
    with SweepStore(out) as store:
        records: dict[str, RunRecord] = {}
        for run in runs:
            done = store.completed(run.key)
            if done:
                records[run.key] = done.model_copy(update={"status": "skipped"})
        pending = [run for run in runs if run.key not in records]

        def record(entry: RunRecord) -> None:
            records[entry.key] = entry
            finished(entry)

        if pending:
            dispatch(pending, store, started, record)
    return [records[run.key] for run in runs if run.key in records]


def completed_keys(out: Path) -> set[str]:
    """Keys of the runs already completed in ``out`` (read-only; for ``--dry-run``)."""
    keys = set()
    journal = out / JOURNAL_DIR
    if journal.is_dir():
        for marker in journal.glob(f"*{MARKER_SUFFIX}"):
            try:
                record = RunRecord.model_validate_json(marker.read_text())
            except (OSError, ValidationError, UnicodeDecodeError):
                continue
            if record.status in ("ok", "invalid") and record.result and (out / record.result).is_file():
                keys.add(record.key)
    return keys
