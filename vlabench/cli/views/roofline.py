"""Rich tables for ``vlabench roofline`` (``vlabench profile``'s are in ``profile.py``, re-exported here)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from vlabench.analysis.roofline import RooflineReport
from vlabench.cli.views.profile import passes_table as passes_table  # the profile's tables, where callers import them
from vlabench.cli.views.profile import profile_table as profile_table
from vlabench.cli.views.tables import PlainTable
from vlabench.commands.roofline import RooflineOutcome

LAYER_BLOCKS = ("llm", "expert")


def _table(title: str, columns: list[str], left: int = 1) -> Table:
    table = PlainTable(title=title, title_justify="left")
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index < left else "right")
    return table


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _mb(value: float) -> str:
    return f"{value / 1e6:,.1f}"


def ceilings_table(report: RooflineReport) -> Table:
    table = _table(f"Ceilings at {report.precision}", ["source", "peak TFLOP/s", "GB/s", "ridge FLOP/B", "from"])
    for ceiling in report.ceilings:
        primary = " (verdicts)" if ceiling.source == report.primary else ""
        table.add_row(
            ceiling.source + primary,
            _num(ceiling.peak_tflops, 4),
            _num(ceiling.bandwidth_gbs, 4),
            f"{ceiling.ridge:.1f}",
            ceiling.detail,
        )
    sources = {c.source for c in report.ceilings}
    for missing in ("datasheet", "measured"):
        if missing not in sources:
            reason = "not in the device profile" if missing == "datasheet" else "not measured (device not on this host)"
            table.add_row(missing, "—", "—", "—", reason)
    return table


def phases_table(report: RooflineReport) -> Table:
    sources = [c.source for c in report.ceilings]
    columns = ["phase", "GFLOP", "weights MB", "act. MB", "KV MB", "FLOP/B", "FLOP/weight B"]
    columns += [f"bound ({s})" for s in sources] + [f"floor ms ({report.primary})"]
    columns += ["measured ms", "achieved TFLOP/s", "% of roofline", "projected ms"]
    table = _table(f"Roofline per phase: {report.model}, {report.precision}, {report.device}", columns)
    for phase in report.phases:
        bounds = [phase.bounds[s].bound for s in sources]
        floor = phase.bounds[report.primary].floor_ms if report.primary else None
        share = phase.share_of_attainable
        table.add_row(
            phase.phase,
            f"{phase.flops / 1e9:,.2f}",
            _mb(phase.weight_bytes),
            _mb(phase.activation_bytes),
            _mb(phase.kv_bytes),
            f"{phase.intensity:.1f}",
            f"{phase.weight_intensity:.1f}",
            *bounds,
            _num(floor, 4),
            _num(phase.measured_ms, 4),
            _num(phase.achieved_tflops, 3),
            "—" if share is None else f"{share:.0%}",
            _num(phase.projected_ms, 4),
        )
    return table


def layers_table(report: RooflineReport, blocks: tuple[str, ...] = LAYER_BLOCKS) -> Table:
    title = f"Per layer: VLM prefill and one action-expert step ({report.precision}, verdict vs {report.primary})"
    columns = [
        "phase",
        "block",
        "layer",
        "GFLOP",
        "MB moved",
        "weights MB",
        "FLOP/B",
        "FLOP/weight B",
        "bound",
        "floor ms",
    ]
    table = _table(title, columns, left=2)
    for row in report.layers:
        if row.block in blocks and row.layer is not None:
            table.add_row(
                row.phase,
                row.block,
                str(row.layer),
                f"{row.flops / 1e9:,.3f}",
                _mb(row.bytes),
                _mb(row.weight_bytes),
                f"{row.intensity:.1f}",
                f"{row.weight_intensity:.1f}",
                row.bound or "—",
                _num(row.floor_ms, 3),
            )
    return table


def operators_table(report: RooflineReport) -> Table:
    table = _table("Heaviest operator kinds (summed over layers)", ["phase", "operator", "×", "GFLOP", "MB", "FLOP/B"])
    table.add_column("floor ms", justify="right")
    for op in report.operators:
        table.add_row(
            op.phase,
            f"{op.block}.{op.name}",
            str(op.count),
            f"{op.flops / 1e9:,.2f}",
            _mb(op.bytes),
            f"{op.intensity:.1f}",
            _num(op.floor_ms, 3),
        )
    return table


def roofline_renderables(outcome: RooflineOutcome, layers: bool) -> list[Any]:
    report = outcome.report
    items: list[Any] = [ceilings_table(report)]
    if outcome.measured_ceilings:
        measured = ", ".join(f"{c.quantity} {c.value:.4g} {c.unit}" for c in outcome.measured_ceilings)
        items.append(Text(f"measured on this host: {measured}"))
    items.append(phases_table(report))
    if layers:
        items.append(layers_table(report))
    items.append(operators_table(report))
    if report.projection is not None:
        efficiency = ", ".join(f"{k} {v:.3g}" for k, v in report.projection.efficiency.items())
        items.append(
            Text(
                f"projection: {report.projection.method}; efficiency {efficiency} "
                f"({report.projection.efficiency_source})"
            )
        )
    verdict = outcome.feasibility
    if verdict is not None:
        memory = "unknown" if verdict.fits_memory is None else ("fits" if verdict.fits_memory else "does NOT fit")
        rate = "meets" if verdict.meets_control_rate else "misses"
        items.append(
            Text(
                f"feasibility (projected): e2e {verdict.e2e_ms:.1f} ms → {verdict.action_hz:.1f} actions/s, {rate} "
                f"{verdict.control_hz:g} Hz; footprint {verdict.footprint_gb:.1f} GB {memory} in "
                f"{_num(verdict.memory_gb)} GB"
            )
        )
    items.append(Text(f"conventions: {report.conventions}", style="dim"))
    return items
