"""Executing a sweep: each run launched alone by the run package's ``Launcher`` (a ``Subprocess`` here, a ``RayTask``
on a cluster), results promoted into the results folder with a journal that makes the sweep resumable after any crash
(even SIGKILL) without partial or duplicate results."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vlabench.atomic import WriteError, atomic_write_text, remove_stale, rescue_text
from vlabench.commands.run import Launcher, Subprocess
from vlabench.errors import VlabenchError
from vlabench.fleet.sweep_file import SweepRun
from vlabench.results.launch_outcome import LaunchOutcome
from vlabench.results.sweep_record import MARKER_SUFFIX, RunRecord

JOURNAL_DIR = ".sweep"
SCRATCH_DIR = "tmp"
"""``<out>/.sweep/tmp/``: each run's config, stderr and results folder while it runs (emptied when a sweep opens)."""
STAGED_SUFFIX = ".staged"


def scratch_folder(out: Path) -> Path:
    return out / JOURNAL_DIR / SCRATCH_DIR


_HELD: set[str] = set()
"""The sweep locks this process holds. A POSIX record lock (``lockf``) is not inherited by a forked child, so a
child that a killed sweep left between fork and exec cannot keep the folder locked; but it neither conflicts within
one process nor survives closing any descriptor of its file here, so this process checks its own locks first."""
_HELD_GUARD = threading.Lock()


class SweepStore:
    """The results folder plus the sweep journal in ``<out>/.sweep/``, held under an exclusive lock.

    A result lands in three atomic steps: staged into the journal folder, the run's marker (naming the result file)
    written, then the staged file renamed into the results folder. Whatever step a crash interrupts, reopening the
    store either finishes the rename (marker present) or discards the staged file (run redone): never a partial
    result, never a duplicate."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.journal = out / JOURNAL_DIR
        self.scratch = scratch_folder(out)
        self._lock: int | None = None
        self._lock_path = ""

    def __enter__(self) -> SweepStore:
        lock_path = os.path.realpath(self.journal / "lock")
        with _HELD_GUARD:
            if lock_path in _HELD:
                raise VlabenchError(self._busy())
            try:
                self.journal.mkdir(parents=True, exist_ok=True)
                self._lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise VlabenchError(f"cannot write to {self.out}: {exc.strerror or exc}") from None
            try:
                fcntl.lockf(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(self._lock)
                self._lock = None
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise VlabenchError(self._busy()) from None
                raise VlabenchError(f"cannot lock {lock_path}: {exc.strerror or exc}") from None
            _HELD.add(lock_path)
            self._lock_path = lock_path
        try:
            self._recover()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            with _HELD_GUARD:
                os.close(self._lock)
                _HELD.discard(self._lock_path)
            self._lock = None

    def _busy(self) -> str:
        return f"another sweep is writing into {self.out}; wait for it or use another --out"

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

    def finish(self, run: SweepRun, outcome: LaunchOutcome) -> RunRecord:
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
        if outcome.status == "failed" or len(outcome.result_texts) != 1:
            record = RunRecord(**{**fields, "status": "failed"})
            atomic_write_text(self.marker_path(run.key), record.model_dump_json(indent=2))
            return record
        result_text = outcome.result_texts[0]
        try:
            result = RunResult.model_validate_json(result_text)
        except ValidationError as exc:
            reason = f"the run returned an invalid result: {exc.errors()[0]['msg']}"
            record = RunRecord(**{**fields, "status": "failed", "reason": reason})
            atomic_write_text(self.marker_path(run.key), record.model_dump_json(indent=2))
            return record
        record = RunRecord(**fields, result=result.file_name(), e2e_p50_ms=result.timing.phases["e2e"].p50)
        try:
            staged = atomic_write_text(self.staged_path(run.key), result_text)
        except WriteError as exc:  # a full disk: keep the measurement elsewhere, say where, stop the sweep
            rescued = rescue_text(result_text, f"{result.run_id}.json")
            if rescued is None:
                sys.stderr.write(result_text + "\n")
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


def run_locally(out: Path, timeout_s: float | None, command: Sequence[str] | None = None) -> Subprocess:
    """A sweep's launcher on this host: each run in a ``Subprocess`` working in the journal of ``out``."""
    return Subprocess(timeout_s, command, scratch_folder(out))


def launched(
    launcher: Launcher, runs: list[SweepRun], started: Callable[[SweepRun], None], in_flight: int
) -> Iterator[tuple[SweepRun, LaunchOutcome]]:
    """Each run launched alone (``launcher.launch([run])``), at most ``in_flight`` at once (more than one: each
    waited on by a thread, for launchers that execute elsewhere), yielded as it finishes."""
    if in_flight <= 1:
        for run in runs:
            started(run)
            yield run, launcher.launch([run])
        return
    pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="vlabench-sweep")
    try:
        waiting = {}
        for run in runs:
            waiting[pool.submit(launcher.launch, [run])] = run
            started(run)
        for done in as_completed(waiting):
            yield waiting[done], done.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def execute_sweep(
    runs: list[SweepRun],
    out: Path,
    launcher: Launcher,
    started: Callable[[SweepRun], None] = lambda run: None,
    finished: Callable[[RunRecord], None] = lambda record: None,
    in_flight: int = 1,
) -> list[RunRecord]:
    """Skip the runs already completed in ``out``, launch the others (``launched``); one record per run, in sweep
    order."""
    with SweepStore(out) as store:
        records: dict[str, RunRecord] = {}
        for run in runs:
            done = store.completed(run.key)
            if done:
                records[run.key] = done.model_copy(update={"status": "skipped"})
        pending = [run for run in runs if run.key not in records]
        for run, outcome in launched(launcher, pending, started, in_flight):
            records[run.key] = store.finish(run, outcome)
            finished(records[run.key])
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
