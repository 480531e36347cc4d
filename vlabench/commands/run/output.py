"""Where a run's results go: the results folder checked before any work, each result written atomically (or
rescued when it cannot be)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vlabench.atomic import remove_stale, require_writable, rescue_text
from vlabench.config import RunConfig
from vlabench.errors import VlabenchError
from vlabench.results.schema import RunResult, write_result
from vlabench.telemetry.energy.external import read_power_log


def check_paths(config: RunConfig) -> None:
    """Before any work: the results folder must take a file (a probe file is created and removed; the temporary
    files killed writers left there are removed) and an external meter's log must be readable."""
    require_writable(config.out, "--out")
    remove_stale(config.out)
    if config.energy_log is not None:
        read_power_log(config.energy_log)


@dataclass(frozen=True)
class Saved:
    """Where a result went: ``problem`` None: into the results folder; else why not, and ``path`` the fallback file
    it went to (None: that failed too, ``text`` must be shown)."""

    path: Path | None
    problem: str | None = None
    text: str = ""


def save_result(result: RunResult, out: Path) -> Saved:
    """Write a result into ``out``; when that fails (a full disk, a quota, an I/O error), into
    ``$TMPDIR/vlabench-unsaved-<run id>.json``: a measurement is never lost."""
    try:
        return Saved(write_result(result, out))
    except VlabenchError as exc:
        text = result.model_dump_json(indent=2)
        return Saved(rescue_text(text, f"{result.run_id}.json"), str(exc), text)
