"""``vlabench site build``: results folders -> a static CET leaderboard (plain files, relative links, no CDN)."""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import pandas as pd
import plotly.offline

import vlabench
from vlabench.analysis.cet import Priority
from vlabench.atomic import staging_folder
from vlabench.errors import InputError, VlabenchError
from vlabench.hardware.devices import DeviceProfile, load_device_profile
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.results.aggregate import load_results
from vlabench.results.store import UnreadableFile, copy_regular

from . import charts
from .model_facts import model_facts
from .reported import reported_entries
from .rows import PROVENANCE, Run, latest_per_configuration, optimizations, provenance, reported_rows, run_rows, slug

MARKER = "vlabench-site.json"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ASSETS = ("site.css", "leaderboard.js", "charts.js")
DEVICE_ROOFLINES = 24
"""A device page draws at most this many rooflines (one per model); the others are on the run pages."""
PAGE_KEYS = (
    # what assets/leaderboard.js reads (gate, cost, ranking, filters, sorting) and the row's identity and page
    *("id", "kind", "run_id", "page", "model_page", "device_page", "model", "device", "device_kind", "backend"),
    *("precision", "optimizations"),
    *("provenance", "valid", "invalid_reason", "reasons", "feasible", "rank", "pareto", "actions_per_chunk"),
    *("latency_p50_ms", "latency_p99_ms", "inference_hz_p50", "action_hz_p99", "joules_per_action"),
    *("usd_per_million_actions", "usd_per_million_actions_electricity_only", "cost_inputs"),
    *("memory_needed_gb", "device_memory_gb", "action_error"),
)
DOWNLOAD_COLUMNS = (
    "rank",
    "feasible",
    "reasons",
    "pareto",
    "provenance",
    "model",
    "device",
    "device_kind",
    "backend",
    "precision",
    "optimizations",
    "cameras",
    "steps",
    "actions_per_chunk",
    "latency_p50_ms",
    "latency_p99_ms",
    "inference_hz_p50",
    "action_hz_p99",
    "joules_per_action",
    "energy_label",
    "usd_per_million_actions",
    "usd_per_million_actions_electricity_only",
    "memory_needed_gb",
    "device_memory_gb",
    "action_error",
    "valid",
    "invalid_reason",
    "published_energy_kj",
    "source",
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


def script_json(data: Any) -> str:
    """JSON safe inside ``<script>``: no ``<``, ``>`` or ``&`` survives, so ``</script>`` and ``<!--`` cannot."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def number(value: Any, digits: int = 4) -> str:
    """A figure with ``digits`` significant digits, an em dash when absent, NaN and ∞ when not finite."""
    if value is None:
        return "—"
    if isinstance(value, float) and not math.isfinite(value):
        return shown(value)
    return f"{value:.{digits}g}"


def shown(value: Any) -> Any:
    """A value as the detail tables print it: non-finite floats as NaN / ∞ / −∞ (Python would say nan, inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("∞" if value > 0 else "−∞")
    return value


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("vlabench.leaderboard_site", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = number
    env.filters["slug"] = slug
    env.filters["shown"] = shown
    env.globals["chart"] = lambda name, root: markupsafe.Markup(charts.Charts.html(name, root))
    return env


def is_site(folder: Path) -> bool:
    """A folder a previous ``vlabench site build`` wrote (it holds the marker file)."""
    return (folder / MARKER).is_file() and (folder / "index.html").is_file()


def check_target(out: Path) -> None:
    """Refuse to replace anything but a previous build or an empty folder."""
    if out.exists() and not (out.is_dir() and (is_site(out) or not any(out.iterdir()))):
        raise InputError(f"{out} exists and is not a vlabench site (no {MARKER}); choose another -o or remove it")


def build_site(paths: list[Path], out: Path, priority: Priority = "cost", control_hz: float = 10.0) -> BuildReport:
    """Build the site into a temporary folder next to ``out`` and rename it into place (never a half site)."""
    if control_hz <= 0:
        raise InputError("--control-hz must be positive")
    loaded, skipped = load_results(paths)
    if not loaded:
        reasons = "".join(f"\n  skipped {problem}" for problem in skipped)
        raise InputError(f"no readable results under {', '.join(map(str, paths))}{reasons}")
    check_target(out)
    named = {path for path in paths if not path.is_dir()}
    runs = [Run(path, result, slug(f"{result.run_id} {path.name}"), path in named) for path, result in loaded]
    rows = run_rows(latest_per_configuration(runs), priority, control_hz) + reported_rows(reported_entries())
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(out.parent, f".{out.name}.partial-")
    try:
        pages = write_site(staging, runs, rows, skipped, priority, control_hz)
        swap_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BuildReport(site=out, runs=len(runs), rows=len(rows), pages=pages, skipped=skipped)


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
    site: Path, runs: list[Run], rows: list[dict[str, Any]], skipped: list[str], priority: str, control_hz: float
) -> int:
    """Every page, asset, chart and download of the site under ``site``; returns the number of HTML pages."""
    with charts.bare_figures() as template:
        write_assets(site, template)
        return write_pages(site, runs, rows, skipped, priority, control_hz)


def write_pages(
    site: Path, runs: list[Run], rows: list[dict[str, Any]], skipped: list[str], priority: str, control_hz: float
) -> int:
    env = environment()
    common = {"version": vlabench.__version__, "built_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    write_downloads(site, rows, priority, control_hz)
    figures = charts.Charts(site)
    pages = 0

    def page(relative: str, template: str, **context: Any) -> None:
        nonlocal pages
        target = site / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        root = "../" * relative.count("/")
        target.write_text(env.get_template(template).render(root=root, **common, **context), encoding="utf-8")
        pages += 1

    points = charts.speedup_points(runs)
    energy_chart = charts.pareto_figure(rows, "joules_per_action", "Latency vs energy", "J per action", control_hz)
    cost_chart = charts.pareto_figure(
        rows, "usd_per_million_actions", "Latency vs cost", "$ per 1M actions", control_hz
    )
    page(
        "index.html",
        "index.html.j2",
        rows=rows,
        data=script_json({"control_hz": control_hz, "priority": priority, "rows": [page_row(r) for r in rows]}),
        priority=priority,
        control_hz=control_hz,
        skipped=skipped,
        filters=filter_options(rows),
        provenance=PROVENANCE,
        pareto_energy=figures.add("pareto-energy", energy_chart),
        pareto_cost=figures.add("pareto-cost", cost_chart),
        speedup=figures.add("speedup", charts.speedup_figure(points)) if points else None,
    )
    row_by_run = {row["id"]: row for row in rows if row["kind"] == "run"}
    drawn: dict[str, str] = {}  # run slug -> its roofline chart, shared by its run page and its device page
    for run in runs:
        trace = publish_run(site, run, skipped)
        figure = charts.roofline_chart(run.result.roofline) if run.result.roofline else None
        if figure is not None:
            drawn[run.slug] = figures.add(f"roofline-{run.slug}", figure)
        page(
            f"runs/{run.slug}.html",
            "run.html.j2",
            run=run,
            r=run.result,
            row=row_by_run.get(run.slug),
            trace=trace,
            optimizations=optimizations(run.result),
            provenance_label=provenance(run.result),
            roofline=drawn.get(run.slug),
        )
    for model in sorted({row["model"] for row in rows} | {run.result.model.name for run in runs}):
        model_runs = sorted((r for r in runs if r.result.model.name == model), key=lambda r: r.result.started_utc)
        spec = model_spec(model)
        title = f"Phase breakdown of {charts.label(model)}, p50"
        page(
            f"models/{slug(model)}.html",
            "model.html.j2",
            model=model,
            spec=spec,
            facts=model_facts(spec) if spec is not None else None,
            rows=[row for row in rows if row["model"] == model],
            runs=model_runs,
            phases=figures.add(f"phases-{slug(model)}", charts.phase_figure(model_runs, title)) if model_runs else None,
        )
    for device in sorted({row["device"] for row in rows} | {run.result.device.profile for run in runs}):
        device_runs = sorted((r for r in runs if r.result.device.profile == device), key=lambda r: r.result.started_utc)
        rooflines = [(run, drawn[run.slug]) for run in roofline_runs(device_runs, set(row_by_run)) if run.slug in drawn]
        page(
            f"devices/{slug(device)}.html",
            "device.html.j2",
            device=device,
            profile=device_profile(device),
            rows=[row for row in rows if row["device"] == device],
            runs=device_runs,
            rooflines=rooflines[:DEVICE_ROOFLINES],
            more_rooflines=len(rooflines[DEVICE_ROOFLINES:]),
        )
    marker = {
        "generator": "vlabench site build",
        "vlabench_version": vlabench.__version__,
        "built_utc": common["built_utc"],
        "priority": priority,
        "control_hz": control_hz,
        "runs": len(runs),
        "rows": len(rows),
        "skipped": skipped,
    }
    (site / MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    return pages


def publish_run(site: Path, run: Run, skipped: list[str]) -> bool:
    """``runs/SLUG.json``: the run's result file as it is (copied through the guarded reader: a regular file, a link
    only when the file was named as an input); ``runs/SLUG.trace.json``: its Chrome trace when that is a regular file
    beside it, never a link (a link would publish whatever file on the host it points to) nor a FIFO or device.
    Returns whether a trace was copied; one that is not copied is added to ``skipped`` with the reason."""
    folder = site / "runs"
    folder.mkdir(exist_ok=True)
    copy_regular(run.path, folder / f"{run.slug}.json", follow_links=run.named)
    if not os.path.lexists(run.trace_path):
        return False
    try:
        copy_regular(run.trace_path, folder / f"{run.slug}.trace.json", follow_links=False)
    except UnreadableFile as exc:
        if str(exc) not in skipped:  # the folder walk reports a link named *.json already
            skipped.append(f"{exc} (the trace is not published)")
        return False
    return True


def page_row(row: dict[str, Any]) -> dict[str, Any]:
    """A leaderboard row as the index page's script needs it (``PAGE_KEYS``); the downloads hold every column."""
    return {key: row.get(key) for key in PAGE_KEYS}


def roofline_runs(device_runs: list[Run], on_board: set[str]) -> list[Run]:
    """One roofline per model on a device: its fastest leaderboard run without optimizations (the analytic counts
    are the same for every run of a model and precision; every run page has its own chart)."""
    chosen: dict[str, Run] = {}
    for run in device_runs:
        if run.slug in on_board and optimizations(run.result) == "none":
            best = chosen.get(run.result.model.name)
            if best is None or e2e_p50(run) < e2e_p50(best):
                chosen[run.result.model.name] = run
    return [chosen[model] for model in sorted(chosen)]


def e2e_p50(run: Run) -> float:
    return run.result.timing.phases["e2e"].p50


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
    table = [{column: row.get(column) for column in DOWNLOAD_COLUMNS} for row in rows]
    cells = [{column: spreadsheet_cell(value) for column, value in row.items()} for row in table]
    frame = pd.DataFrame(cells, columns=list(DOWNLOAD_COLUMNS))
    frame.to_csv(site / "leaderboard.csv", index=False, lineterminator="\r\n")  # RFC 4180: a CR in a cell is quoted
    document = {"priority": priority, "control_hz": control_hz, "rows": table}
    (site / "leaderboard.json").write_text(json.dumps(document, indent=2, allow_nan=False), encoding="utf-8")


def filter_options(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    def distinct(key: str) -> list[str]:
        return sorted({str(row[key]) for row in rows if row[key] is not None})

    return {"model": distinct("model"), "device_kind": distinct("device_kind"), "backend": distinct("backend")}


def model_spec(name: str) -> ModelSpec | None:
    try:
        return load_model_spec(name)
    except InputError:
        return None


def device_profile(name: str) -> DeviceProfile | None:
    try:
        return load_device_profile(name)
    except InputError:
        return None
