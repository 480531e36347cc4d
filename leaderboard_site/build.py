"""``vlabench site build``: results folders -> a static CET leaderboard (plain files, relative links, no CDN)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.offline

import vlabench
from vlabench.analysis.cet import EXECUTIONS, ExecutionModel, Priority
from vlabench.atomic import staging_folder
from vlabench.errors import InputError, VlabenchError
from vlabench.results.aggregate import load_results
from vlabench.results.store import json_files, survey
from vlabench.results.task_success_rows import SUCCESS_FIELDS, cells, load_task_success, mark_speed_success_front

from . import charts
from .estimates import projected_rows, reported_rows
from .pages import write_pages
from .ranking import rank_rows
from .reported import reported_entries
from .rows import Run, latest_per_configuration, row_key, run_rows, slug

MARKER = "vlabench-site.json"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ASSETS = ("site.css", "leaderboard.js", "charts.js")
BUNDLED = Path(vlabench.__file__).resolve().parents[1] / "benchmarks" / "results"
"""The results a source checkout ships (``quickstart/``: run results; ``profile/``: profile artifacts)."""
PROFILE_KIND = "profile"
DOWNLOAD_COLUMNS = (
    "id",
    "rank",
    "group",
    "feasible",
    "reasons",
    "pareto",
    "provenance",
    "model",
    "device",
    "device_kind",
    "deployment",
    "robots",
    "offload_server",
    "backend",
    "precision",
    "optimizations",
    "cameras",
    "steps",
    "chunk",
    "batch",
    "actions_per_chunk",
    "latency_p50_ms",
    "latency_p99_ms",
    "inference_hz_p50",
    "reaction_ms",
    "inference_hz_p99",
    "execution",
    "delivered_action_hz",
    "joules_per_inference",
    "joules_per_action",
    "energy_label",
    "usd_per_million_actions",
    "usd_per_million_actions_electricity_only",
    "cost_basis",
    "memory_needed_gb",
    "device_memory_gb",
    "action_error",
    "valid",
    "invalid_reason",
    "approximate",
    "error_band",
    "published_energy_kj",
    "source",
    "stack",
    "date",
    "vlabench_version",
    "run_id",
)


@dataclass
class BuildReport:
    """What a build wrote and which input files it skipped (with the reason)."""

    site: Path
    runs: int
    rows: int
    pages: int
    skipped: list[str] = field(default_factory=list)


def is_site(folder: Path) -> bool:
    """A folder a previous ``vlabench site build`` wrote (it holds the marker file)."""
    return (folder / MARKER).is_file() and (folder / "index.html").is_file()


def check_target(out: Path) -> None:
    """Refuse to replace anything but a previous build or an empty folder."""
    if out.exists() and not (out.is_dir() and (is_site(out) or not any(out.iterdir()))):
        raise InputError(f"{out} exists and is not a vlabench site (no {MARKER}); choose another -o or remove it")


def bundled_inputs() -> list[Path]:
    """The measured run results and profiles a source checkout ships (none in an installed wheel)."""
    files = [path for folder in ("quickstart", "profile") for path in sorted((BUNDLED / folder).glob("*.json"))]
    return [path for path in files if not path.name.endswith((".meta.json", ".trace.json"))]


def build_site(
    paths: list[Path],
    out: Path,
    priority: Priority = "cost",
    control_hz: float = 10.0,
    execution: ExecutionModel | None = None,
    projected: bool = False,
) -> BuildReport:
    """Build the site into a temporary folder next to ``out`` and rename it into place (never a half site). No
    ``paths``: the bundled leaderboard (the results this checkout ships and the published rows). ``projected``: use
    the projection model (``analysis.projection``, slow the first time it is fitted): projected rows, and estimated
    energy (so cost) for the published rows."""
    if control_hz <= 0:
        raise InputError("--control-hz must be positive")
    execution = execution or ExecutionModel()
    bundled = not paths
    inputs = bundled_inputs() if bundled else paths
    run_inputs = [path for path in inputs if path.is_dir() or survey(path, PROFILE_KIND).kind != PROFILE_KIND]
    loaded, skipped = load_results(run_inputs)
    if not loaded and not bundled:
        reasons = "".join(f"\n  skipped {problem}" for problem in skipped)
        raise InputError(f"no readable results under {', '.join(map(str, paths))}{reasons}")
    check_target(out)
    named = {path for path in inputs if not path.is_dir()}
    runs = [Run(path, result, slug(f"{result.run_id} {path.name}"), path in named) for path, result in loaded]
    board = latest_per_configuration(runs)
    entries = reported_entries()
    energies = reported_energies(entries) if projected else {}
    successes = cells(load_task_success(run_inputs)[0])
    unranked = run_rows(board, control_hz, successes) + reported_rows(entries, energies)
    if projected:
        unranked += projected_rows(projections())
    for row in unranked:  # published and projected figures are for a policy on the robot's own device
        row.setdefault("deployment", "on-robot")
        row.setdefault("robots", 1)
    rows = rank_rows(unranked, priority, control_hz, execution)
    mark_speed_success_front(rows)
    settings = {
        "priority": priority,
        "control_hz": control_hz,
        "execution": execution.mode,
        "chunk": execution.actions_per_chunk,
        "modes": list(EXECUTIONS),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(out.parent, f".{out.name}.partial-")
    try:
        pages = write_site(staging, runs, rows, skipped, settings, find_profiles(inputs, board))
        swap_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BuildReport(site=out, runs=len(runs), rows=len(rows), pages=pages, skipped=skipped)


def projections() -> list[Any]:
    """``analysis.projection.project_all``: every (model, device, stack, precision) the profiles allow, projected."""
    from vlabench.analysis.projection import project_all

    return project_all()


def reported_energies(entries: list[Any]) -> dict[str, float | None]:
    """Estimated J per inference of each published row (the device's power model at the published latency)."""
    from vlabench.analysis.projection import estimated_joules_per_inference

    from .estimates import reported_id

    return {
        reported_id(entry): estimated_joules_per_inference(
            entry.latency.model, entry.latency.device, entry.latency.precision, entry.latency.phases_ms["e2e"]
        )
        for entry in entries
    }


def find_profiles(inputs: list[Path], runs: list[Run]) -> dict[str, Path]:
    """The latest ``vlabench profile`` artifact among the inputs for each run's configuration, by run slug (a
    profile's header names its model, device, backend and precision: ``results.header.MeasuredArtifact``)."""
    latest: dict[tuple, tuple[str, Path]] = {}
    for root in inputs:
        for path in json_files(root) if root.is_dir() else [root]:
            found = survey(path, PROFILE_KIND)
            data = found.data if found.kind == PROFILE_KIND and isinstance(found.data, dict) else None
            try:
                key = tuple(str(data[name]) for name in ("model", "device", "backend", "precision"))
                started = str(data["started_utc"])
            except (KeyError, TypeError):
                continue
            if key not in latest or started > latest[key][0]:
                latest[key] = (started, path)
    return {run.slug: latest[row_key(run.result)[:4]][1] for run in runs if row_key(run.result)[:4] in latest}


def swap_into_place(staging: Path, out: Path) -> None:
    """Rename the finished build over ``out``; the previous build is removed only once the new one is in place."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    try:
        staging.rename(out)
    except OSError as exc:
        if old is not None:
            old.rename(out)
        raise VlabenchError(f"cannot move the built site into {out}: {exc.strerror or exc}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_site(
    site: Path,
    runs: list[Run],
    rows: list[dict[str, Any]],
    skipped: list[str],
    settings: dict[str, Any],
    profiles: dict[str, Path],
) -> int:
    """Every page, asset, chart and download of the site under ``site``; returns the number of HTML pages."""
    with charts.bare_figures() as template:
        write_assets(site, template)
        write_downloads(site, rows, settings["priority"], settings["control_hz"])
        pages = write_pages(site, runs, rows, skipped, settings, profiles)
    marker = {
        "generator": "vlabench site build",
        "vlabench_version": vlabench.__version__,
        **settings,
        "runs": len(runs),
        "rows": len(rows),
        "skipped": skipped,
    }
    (site / MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    return pages


def write_assets(site: Path, template: str) -> None:
    """The stylesheet, the scripts, plotly.js and the plotly_white template (written once, referenced by relative
    path)."""
    assets = site / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    package = resources.files("vlabench.leaderboard_site").joinpath("assets")
    for name in ASSETS:
        (assets / name).write_text(package.joinpath(name).read_text(encoding="utf-8"), encoding="utf-8")
    (assets / "plotly.min.js").write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
    (assets / "plot-template.js").write_text(f"window.VLABENCH_TEMPLATE = {template};\n", encoding="utf-8")


def spreadsheet_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: one that would start a formula (``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return, OWASP's list) gets a leading apostrophe. Numbers stay numbers."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def write_downloads(site: Path, rows: list[dict[str, Any]], priority: str, control_hz: float) -> None:
    """``leaderboard.csv`` and ``leaderboard.json``: the table as built (ranked at the build's target and priority);
    the CSV's text cannot start a spreadsheet formula (``spreadsheet_cell``), the JSON holds the names as they are."""
    columns = list(DOWNLOAD_COLUMNS)
    if any(row.get("task_success") is not None for row in rows):  # a trained model's closed-loop success
        columns += [*SUCCESS_FIELDS, "speed_success_front"]
    table = [{column: row.get(column) for column in columns} for row in rows]
    cells = [{column: spreadsheet_cell(value) for column, value in row.items()} for row in table]
    frame = pd.DataFrame(cells, columns=columns)
    frame.to_csv(site / "leaderboard.csv", index=False, lineterminator="\r\n")  # RFC 4180: a CR in a cell is quoted
    document = {"priority": priority, "control_hz": control_hz, "rows": table}
    (site / "leaderboard.json").write_text(json.dumps(document, allow_nan=False), encoding="utf-8")
