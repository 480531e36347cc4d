"""The leaderboard's rows from its inputs, shared by ``vlabench site build`` and ``vlabench rank``: measured runs (the
latest per configuration), published figures and, when asked, the projection model's rows; each row knows the
question it answers (``analysis.question``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vlabench
from vlabench.errors import InputError
from vlabench.results.aggregate import load_results
from vlabench.results.store import survey
from vlabench.results.task_success_rows import cells, load_task_success

from .estimates import projected_rows, reported_id, reported_rows
from .reported import reported_entries
from .rows import Run, latest_per_configuration, run_rows, slug

BUNDLED = Path(vlabench.__file__).resolve().parents[1] / "benchmarks" / "results"
"""The results a source checkout ships (``quickstart/``: run results; ``profile/``: profile artifacts)."""
PROFILE_KIND = "profile"
Progress = Callable[[str, int, int], None]
"""Told each stage's progress: (what, done, of how many)."""


def quiet(stage: str, done: int, total: int) -> None:
    """A progress callback that says nothing."""


@dataclass
class Board:
    """Every unranked row of a leaderboard, the runs behind the measured ones, the files passed over and why."""

    inputs: list[Path]
    runs: list[Run]
    board: list[Run]
    rows: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)


def bundled_inputs() -> list[Path]:
    """The measured run results and profiles a source checkout ships (none in an installed wheel)."""
    files = [path for folder in ("quickstart", "profile") for path in sorted((BUNDLED / folder).glob("*.json"))]
    return [path for path in files if not path.name.endswith((".meta.json", ".trace.json"))]


def load_board(
    paths: list[Path],
    control_hz: float,
    projected: bool = False,
    published: bool = True,
    progress: Progress = quiet,
    latest_only: bool = True,
    include_partial: bool = False,
) -> Board:
    """The rows of ``paths`` (no paths: the bundled results) with the published rows (``published``) and the
    projection model's (``projected``: slow the first time it is fitted); ``latest_only``: one row per configuration,
    its latest run (the site), else one per run (``vlabench rank``); partial results (interrupted after timing
    began) only with ``include_partial``. Refuses inputs with no readable result unless the
    board is the bundled one."""
    bundled = not paths
    inputs = bundled_inputs() if bundled else paths
    progress("reading results", 0, 1)
    run_inputs = [path for path in inputs if path.is_dir() or survey(path, PROFILE_KIND).kind != PROFILE_KIND]
    loaded, skipped = load_results(run_inputs, include_partial)
    if not loaded and not bundled:
        reasons = "".join(f"\n  skipped {problem}" for problem in skipped)
        raise InputError(f"no readable results under {', '.join(map(str, paths))}{reasons}")
    named = {path for path in inputs if not path.is_dir()}
    runs = [Run(path, result, slug(f"{result.run_id} {path.name}"), path in named) for path, result in loaded]
    board = latest_per_configuration(runs) if latest_only else runs
    progress("reading results", 1, 1)
    rows = run_rows(board, control_hz, cells(load_task_success(run_inputs)[0]))
    entries = reported_entries() if published else []
    energies = reported_energies(entries) if projected and entries else {}
    rows += reported_rows(entries, energies)
    if projected:
        rows += projected_rows(projections(progress))
    return Board(inputs=inputs, runs=runs, board=board, rows=rows, skipped=skipped)


def projections(progress: Progress = quiet) -> list[Any]:
    """``analysis.projection.project_all`` model by model (each model's rows at its own workload), with progress."""
    from vlabench.analysis.projection import project_all
    from vlabench.models.specs import model_names

    models = [name for name in model_names() if not name.endswith("-tiny")]
    rows: list[Any] = []
    for done, model in enumerate(models):
        progress("projecting", done, len(models))
        rows += project_all(models=[model])
    progress("projecting", len(models), len(models))
    return rows


def reported_energies(entries: list[Any]) -> dict[str, float | None]:
    """Estimated J per inference of each published row (the device's power model at the published latency)."""
    from vlabench.analysis.projection import estimated_joules_per_inference

    return {
        reported_id(entry): estimated_joules_per_inference(
            entry.latency.model, entry.latency.device, entry.latency.precision, entry.latency.phases_ms["e2e"]
        )
        for entry in entries
    }
