"""The site's HTML pages: the index (table, matrix, charts), one page per run, model and device."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import vlabench
from vlabench.analysis.cet import ExecutionModel
from vlabench.analysis.served_cost import COLUMNS as SERVED_COLUMNS
from vlabench.errors import InputError
from vlabench.hardware.devices import DeviceProfile, load_device_profile
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.results.store import UnreadableFile, copy_regular

from . import charts
from .board import Progress, quiet
from .model_facts import model_facts
from .render import environment
from .rows import PROVENANCE, Run, optimizations, provenance, slug

DEVICE_ROOFLINES = 24
"""A device page draws at most this many rooflines (one per model); the others are on the run pages."""
PAGE_KEYS = (
    # what assets/leaderboard.js reads (question, gate, cost, ranking, charts, search) and the row's identity
    *("id", "kind", "run_id", "model", "cameras", "steps", "prompt_tokens", "device", "device_kind", "device_class"),
    *("backend", "precision", "optimizations", "provenance", "group", "valid", "invalid_reason", "approximate"),
    *("latency_p50_ms", "latency_p99_ms", "memory_needed_gb", "device_memory_gb", "device_memory_nameplate_gb"),
    *("chunk", "action_error", "action_error_note", "p99_note", "error_band", "calibration", "band_coverage"),
    *("band_basis",),
    *("stack", "date", "source", "assumed", "phases", "page", "device_page", "energy_label"),
    *("joules_per_inference", "idle_w", "price_usd", "lifetime_years", "duty_cycle", "electricity_usd_per_kwh"),
    *("deployment", "robots", "robots_per_device", "rows_per_inference", "execution", "actions_per_chunk"),
    *("serving_note", "offload_server", "measured_control_hz"),
    *SERVED_COLUMNS.values(),
)


def page_value(row: dict[str, Any], key: str) -> Any:
    """A row's value as the page gets it. Three are lighter there than in the downloads: phases (drawn, never
    ranked) to 4 significant digits; a p99 equal to the p50 (a projected or published row's one latency) left out
    (the script restores it); the source only for published rows (their citation; a projection's is on the
    downloads)."""
    value = row.get(key)
    if key == "phases" and value:
        return {name: [None if x is None else float(f"{x:.4g}") for x in pair] for name, pair in value.items()}
    if key == "latency_p99_ms" and value == row.get("latency_p50_ms"):
        return None
    if key == "source" and row.get("kind") != "reported":
        return None
    return value


def page_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The leaderboard rows as the index page's script needs them, column by column: ``columns`` (``PAGE_KEYS``)
    and ``rows`` (one list of values per row, ``page_value``; None where a row has no value); the downloads hold
    every column at full precision."""
    return {"columns": list(PAGE_KEYS), "rows": [[page_value(row, key) for key in PAGE_KEYS] for row in rows]}


class Writer:
    """Renders templates into a site folder, counting pages; ``root`` makes every link relative."""

    def __init__(self, site: Path) -> None:
        self.site, self.env, self.pages = site, environment(), 0
        self.common = {
            "version": vlabench.__version__,
            "built_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        }

    def page(self, relative: str, template: str, **context: Any) -> None:
        target = self.site / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        root = "../" * relative.count("/")
        html = self.env.get_template(template).render(root=root, **self.common, **context)
        target.write_text(html, encoding="utf-8")
        self.pages += 1


def write_pages(
    site: Path,
    runs: list[Run],
    rows: list[dict[str, Any]],
    skipped: list[str],
    settings: dict[str, Any],
    profiles: dict[str, Path],
    progress: Progress = quiet,
) -> int:
    """Every HTML page of the site; ``settings``: priority, control_hz and the execution model the build used;
    ``profiles``: a profile artifact by run slug. Returns the number of pages."""
    writer = Writer(site)
    figures = charts.Charts(site)
    writer.page("index.html", "index.html.j2", settings=settings, skipped=skipped, provenance=PROVENANCE)
    row_by_run = {row["id"]: row for row in rows if row["kind"] == "run"}
    drawn: dict[str, str] = {}  # run slug -> its roofline chart, shared by its run page and its device page
    execution = ExecutionModel(mode=settings["execution"], actions_per_chunk=settings["chunk"])
    for done, run in enumerate(runs):
        progress("writing run pages", done, len(runs))
        trace, profile = publish_run(site, run, skipped), publish_profile(site, run, profiles.get(run.slug), skipped)
        figure = charts.roofline_chart(run.result.roofline) if run.result.roofline else None
        if figure is not None:
            drawn[run.slug] = figures.add(f"roofline-{run.slug}", figure)
        title = f"Phases of this run, p50 and p99 ({charts.label(run.result.backend)} {run.result.precision})"
        writer.page(
            f"runs/{run.slug}.html",
            "run.html.j2",
            run=run,
            r=run.result,
            row=row_by_run.get(run.slug),
            trace=trace,
            profile=profile,
            optimizations=optimizations(run.result),
            provenance_label=provenance(run.result),
            roofline=drawn.get(run.slug),
            phases=figures.add(f"phases-run-{run.slug}", charts.run_phase_figure(run, title)),
            execution=execution.label(),
            settings=settings,
        )
    for model in sorted({row["model"] for row in rows} | {run.result.model.name for run in runs}):
        model_runs = sorted((r for r in runs if r.result.model.name == model), key=lambda r: r.result.started_utc)
        spec = model_spec(model)
        title = f"Phase breakdown of {charts.label(model)}, p50"
        writer.page(
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
        writer.page(
            f"devices/{slug(device)}.html",
            "device.html.j2",
            device=device,
            profile=device_profile(device),
            rows=[row for row in rows if row["device"] == device],
            runs=device_runs,
            rooflines=rooflines[:DEVICE_ROOFLINES],
            more_rooflines=len(rooflines[DEVICE_ROOFLINES:]),
        )
    return writer.pages


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


def publish_profile(site: Path, run: Run, profile: Path | None, skipped: list[str]) -> bool:
    """``runs/SLUG.profile.json``: the latest ``vlabench profile`` artifact of the run's configuration, when one is
    among the inputs (a regular file, never a link)."""
    if profile is None:
        return False
    try:
        copy_regular(profile, site / "runs" / f"{run.slug}.profile.json", follow_links=False)
    except UnreadableFile as exc:
        skipped.append(f"{exc} (the profile is not published)")
        return False
    return True


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
