"""The ``Subprocess`` launcher: one run as ``python3 -m vlabench run --config <per-run yaml>`` in a process group of
its own (killed whole on timeout, and when this process dies), its result read back from the child's results
folder."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from vlabench import errors
from vlabench.atomic import owned_prefix, remove_stale
from vlabench.commands.run.launchers import Launchable, finished
from vlabench.results.launch_outcome import LaunchOutcome

CHILD_PREFIX = "vlabench-sweep-"
PR_SET_PDEATHSIG = 1
STDERR_TAIL_CHARS = 4000
ORPHANED_EXIT_CODE = 128 + signal.SIGKILL
"""A child whose launcher died before it could arm ``PR_SET_PDEATHSIG`` exits as if that signal had come."""
ERRORS_BY_EXIT_CODE = {
    error.exit_code: error.__name__
    for error in (errors.InputError, errors.UnavailableError, errors.InsufficientMemoryError)
}
"""The vlabench errors a child's exit code names without doubt (exit 1 is also an unexpected crash)."""


def die_with_parent(parent: int) -> None:
    """In the child (Linux): receive SIGKILL when the launching process ``parent`` dies, so no orphan keeps running;
    a parent that died before the signal was armed (between fork and here) ends the child at once."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(ORPHANED_EXIT_CODE)


def kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def failure_reason(code: int, stderr: str) -> str:
    """``killed by SIGKILL (out of memory? ...)``, or ``exit code 2: error: ...`` from the child's last error."""
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("error:")]
    detail = " ".join(lines[starts[-1] :]) if starts else (lines[-1] if lines else "no output")
    return f"exit code {code}: {detail}"


@dataclass(frozen=True)
class Subprocess:
    """``command`` replaces ``python3 -m vlabench run`` (tests); the work folder is made in ``scratch`` (default: the
    system's temporary folder, where those of killed processes are removed first)."""

    timeout_s: float | None = None
    command: Sequence[str] | None = None
    scratch: Path | None = None

    def launch(self, runs: Sequence[Launchable]) -> LaunchOutcome:
        if len(runs) != 1:
            raise ValueError(f"a subprocess launch runs one config, not {len(runs)}")
        started, started_utc = time.monotonic(), datetime.now(timezone.utc)
        scratch = self.scratch
        if scratch is None:
            scratch = Path(tempfile.gettempdir())
            remove_stale(scratch, CHILD_PREFIX)
        with tempfile.TemporaryDirectory(prefix=owned_prefix(CHILD_PREFIX), dir=scratch) as temporary:
            work = Path(temporary)
            settings = runs[0].config.model_copy(update={"out": work / "out"}).model_dump(mode="json")
            (work / "run.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
            argv = [*(self.command or (sys.executable, "-m", "vlabench", "run")), "--config", str(work / "run.yaml")]
            with open(work / "stderr.log", "wb") as stderr:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    start_new_session=True,
                    preexec_fn=functools.partial(die_with_parent, os.getpid()),
                )
                try:
                    code = process.wait(timeout=self.timeout_s)
                except subprocess.TimeoutExpired:
                    kill_group(process)
                    reason = f"timed out after {self.timeout_s:g} s (process group killed)"
                    return finished(started, started_utc, status="failed", reason=reason)
                except BaseException:
                    kill_group(process)
                    raise
            produced = sorted((work / "out").glob("*.json"))
            if code in (0, errors.InvalidResultError.exit_code) and len(produced) == 1:
                status = "ok" if code == 0 else "invalid"
                text = produced[0].read_text()
                return finished(started, started_utc, status=status, result_texts=[text], exit_code=code)
            tail = (work / "stderr.log").read_text(errors="replace")[-STDERR_TAIL_CHARS:]
            reason = failure_reason(code, tail) if code else f"exit code 0 but {len(produced)} result files"
            error = ERRORS_BY_EXIT_CODE.get(code)
            return finished(started, started_utc, status="failed", reason=reason, error=error, exit_code=code)
