"""``vlabench site build``: results folders -> a static CET leaderboard (plain files, relative links, no CDN)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

import vlabench
from vlabench.analysis.cet import EXECUTIONS, CostAssumptions, ExecutionModel, Priority
from vlabench.analysis.question import WORKLOAD_COLUMNS
from vlabench.atomic import WriteError, require_writable, staging_folder
from vlabench.errors import InputError, VlabenchError
from vlabench.results.store import SITE_MARKER, json_files, survey
from vlabench.results.task_success_rows import SUCCESS_FIELDS, mark_speed_success_front

from . import charts
from .board import PROFILE_KIND, Progress, load_board, quiet
from .pages import page_rows, write_pages
from .ranking import canonical_workloads, model_defaults, rank_rows
from .rows import Run, row_key

MARKER = SITE_MARKER
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ASSETS = ("site.css", "leaderboard.js", "charts.js")
PLOTLY = "plotly-basic.min.js"
"""plotly.js's basic partial bundle (scatter, bar, error bars), vendored from npm (``assets/vendor/README.md``)."""
DOWNLOAD_COLUMNS = (
    *("id", "question", "rank", "tied", "tied_with", "group", "feasible", "reasons", "pareto", "provenance"),
    *("model", "cameras", "steps", "prompt_tokens", "device", "device_kind", "device_class", "deployment", "robots"),
    *("serving_note", "offload_server", "backend", "precision", "optimizations", "chunk", "batch"),
    *("actions_per_chunk", "latency_p50_ms", "latency_p99_ms", "inference_hz_p50", "reaction_ms", "inference_hz_p99"),
    *("execution", "delivered_action_hz", "joules_per_inference", "joules_per_action", "energy_label"),
    *("usd_per_robot_hour", "usd_per_robot_hour_electricity_only", "usd_per_million_actions"),
    *("usd_per_million_actions_electricity_only", "cost_basis", "price_usd", "price_source", "duty_cycle"),
    *("lifetime_years", "electricity_usd_per_kwh", "memory_needed_gb", "device_memory_gb", "action_error", "valid"),
    *("invalid_reason", "approximate", "error_band", "calibration", "band_coverage", "band_basis"),
    *("published_energy_kj",),
    *("source", "stack", "date", "vlabench_version", "run_id"),
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


def build_site(
    paths: list[Path],
    out: Path,
    priority: Priority = "cost",
    control_hz: float = 10.0,
    execution: ExecutionModel | None = None,
    projected: bool = False,
    progress: Progress = quiet,
) -> BuildReport:
    """Build the site into a temporary folder next to ``out`` and rename it into place (never a half site). No
    ``paths``: the bundled leaderboard (the results this checkout ships and the published rows). ``projected``: use
    the projection model (``analysis.projection``, slow the first time it is fitted): projected rows, and estimated
    energy (so cost) for the published rows. ``progress`` is told each stage."""
    if control_hz <= 0:
        raise InputError("--control-hz must be positive")
    execution = execution or ExecutionModel()
    require_writable(out.parent, "-o", "a site")
    check_target(out)
    board = load_board(paths, control_hz, projected=projected, progress=progress)
    progress("ranking", 0, 1)
    rows = rank_rows(board.rows, priority, control_hz, execution)
    mark_speed_success_front(rows)
    progress("ranking", 1, 1)
    defaults = model_defaults()
    canonical = canonical_workloads(rows, defaults)
    settings = {
        "priority": priority,
        "control_hz": control_hz,
        "execution": execution.mode,
        "chunk": execution.actions_per_chunk,
        "modes": list(EXECUTIONS),
        "assumptions": CostAssumptions().model_dump(),
        "canonical": {
            model: dict(zip(WORKLOAD_COLUMNS, workload, strict=True)) for model, workload in canonical.items()
        },
        "own_workload": {model: model in defaults and defaults[model] == w for model, w in canonical.items()},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(out.parent, f".{out.name}.partial-")
    try:
        pages = write_site(
            staging, board.runs, rows, board.skipped, settings, find_profiles(board.inputs, board.board), progress
        )
        swap_into_place(staging, out)
    except OSError as exc:  # a full disk, a quota, an I/O error: no half site, one clear message
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteError(f"cannot write the site into {out.parent}: {exc.strerror or exc}", exc.errno) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BuildReport(site=out, runs=len(board.runs), rows=len(rows), pages=pages, skipped=board.skipped)


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
    progress: Progress = quiet,
) -> int:
    """Every page, asset, chart and download of the site under ``site``; returns the number of HTML pages."""
    with charts.bare_figures() as template:
        write_assets(site, template)
        write_data(site, rows, settings)
        write_downloads(site, rows, settings["priority"], settings["control_hz"])
        pages = write_pages(site, runs, rows, skipped, settings, profiles, progress)
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
    """The stylesheet, the scripts, plotly.js's basic bundle and the plotly_white template (written once,
    referenced by relative path)."""
    assets = site / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    package = resources.files("vlabench.leaderboard_site").joinpath("assets")
    for name in ASSETS:
        (assets / name).write_text(package.joinpath(name).read_text(encoding="utf-8"), encoding="utf-8")
    (assets / PLOTLY).write_bytes(package.joinpath("vendor", PLOTLY).read_bytes())
    (assets / "plot-template.js").write_text(f"window.VLABENCH_TEMPLATE = {template};\n", encoding="utf-8")


def write_data(site: Path, rows: list[dict[str, Any]], settings: dict[str, Any]) -> None:
    """``data/board.js``: the rows the index page's script ranks (``pages.page_rows``: columns and values), gzipped
    JSON in base64 (a script, so that the page also works opened from disk); the page decompresses it."""
    document = json.dumps({**settings, **page_rows(rows)}, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    packed = base64.b64encode(gzip.compress(document.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")
    (site / "data").mkdir(exist_ok=True)
    (site / "data" / "board.js").write_text(f'window.VLABENCH_BOARD = "{packed}";\n', encoding="ascii")


def spreadsheet_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: one that would start a formula (``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return, OWASP's list) gets a leading apostrophe. Numbers stay numbers."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def write_downloads(site: Path, rows: list[dict[str, Any]], priority: str, control_hz: float) -> None:
    """``leaderboard.csv`` and ``leaderboard.json``: every row ranked within its question at the build's target,
    execution model and priority with every provenance and deployment kept (what the page shows before the reader
    changes a setting); the CSV's text cannot start a spreadsheet formula (``spreadsheet_cell``), the JSON holds
    the names as they are."""
    columns = list(DOWNLOAD_COLUMNS)
    if any(row.get("task_success") is not None for row in rows):  # a trained model's closed-loop success
        columns += [*SUCCESS_FIELDS, "speed_success_front"]
    table = [{column: row.get(column) for column in columns} for row in rows]
    cells = [{column: spreadsheet_cell(value) for column, value in row.items()} for row in table]
    frame = pd.DataFrame(cells, columns=columns)
    frame.to_csv(site / "leaderboard.csv", index=False, lineterminator="\r\n")  # RFC 4180: a CR in a cell is quoted
    document = {"priority": priority, "control_hz": control_hz, "rows": table}
    (site / "leaderboard.json").write_text(json.dumps(document, allow_nan=False), encoding="utf-8")
