"""What ``vlabench fidelity`` and ``vlabench calibrate dp-cache`` show."""

from __future__ import annotations

from rich.table import Table

from vlabench.cli.views.tables import PlainTable
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.results.fidelity_artifact import FidelityReport
from vlabench.results.task_success import TaskSuccessReport


def fidelity_tables(report: FidelityReport) -> list[Table]:
    table = PlainTable(
        title=f"Open loop: {report.model}, {report.open_loop[0].error.samples} observations vs the exact path"
    )
    for column in ("variant", "max abs", "RMSE", "cosine", "relative"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in report.open_loop:
        e = row.error
        table.add_row(row.variant.name, f"{e.max_abs:.4g}", f"{e.rmse:.4g}", f"{e.cosine:.6f}", f"{e.relative:.4g}")
    tables = [table]
    if report.closed_loop:
        closed = PlainTable(title=f"Closed loop: {report.closed_loop_task}")
        for column in ("variant", "success", "rate", "mean final distance m", "expert calls per chunk"):
            closed.add_column(column, justify="left" if column == "variant" else "right")
        for row in report.closed_loop:
            closed.add_row(
                row.variant,
                f"{row.successes}/{row.episodes}",
                f"{row.success_rate:.0%}",
                f"{row.mean_final_distance_m:.4f}",
                f"{row.expert_calls_per_chunk:.1f}",
            )
        tables.append(closed)
    if report.task_success is not None:
        tables += task_success_tables(report.task_success)
    return tables


def _interval(low: float, high: float, signed: bool = False) -> str:
    return f"{low:+.0%} … {high:+.0%}" if signed else f"{low:.0%} … {high:.0%}"


def task_success_tables(success: TaskSuccessReport) -> list[Table]:
    """Success per variant (Wilson 95%), its paired difference to the reference, the speedup; then per task."""
    overall = PlainTable(
        title=f"Closed loop: {success.benchmark}, {success.episodes_from}; "
        f"{success.actions_per_chunk} of {success.chunk} actions per inference, at most {success.max_steps} steps"
    )
    for column in (
        "variant",
        "success",
        "95% interval",
        "Δ vs reference",
        "Δ 95% interval",
        "cycle ms p50",
        "speedup",
        "mark",
    ):
        overall.add_column(column, justify="left" if column in ("variant", "mark") else "right")
    for row in [success.expert, success.random, *success.variants]:
        low, high = row.difference_interval or (0.0, 0.0)
        is_reference = row.variant == success.reference
        overall.add_row(
            row.variant,
            f"{row.successes}/{row.episodes} ({row.success_rate:.0%})",
            _interval(*row.interval),
            "reference" if is_reference else f"{row.difference:+.1%}",
            "" if is_reference else _interval(low, high, signed=True),
            f"{row.cycle_ms.p50:.2f}" if row.cycle_ms else "",
            f"{row.speedup:.2f}×" if row.speedup else "",
            "below the reference" if row.below_reference else "",
        )
    per_task = PlainTable(title="Success per task (Wilson 95% interval)")
    per_task.add_column("variant")
    for task in success.tasks:
        per_task.add_column(task, justify="right")
    for row in [success.expert, success.random, *success.variants]:
        per_task.add_row(row.variant, *(f"{t.success_rate:.0%} ({_interval(*t.interval)})" for t in row.tasks))
    return [overall, per_task]


def closed_loop_schemes(report: FidelityReport) -> list[str]:
    """How each reduced-precision closed-loop row's policy was made, and the Linear layers kept at fp32."""
    lines = []
    for row in report.closed_loop:
        if row.scheme:
            kept = f"; kept at fp32: {', '.join(row.float_linears)}" if row.float_linears else ""
            lines.append(f"{row.variant}: {row.scheme}{kept}")
    return lines


def schedule_lines(schedule: DPCacheSchedule, budget: float) -> list[str]:
    """The calibrated schedule: step-to-step similarity, steps computed, error against the budget."""
    report = schedule.calibration or {}
    similarity = ", ".join(f"{value:.3f}" for value in report.get("step_similarity", []))
    return [
        f"step-to-step velocity cosine: {similarity}",
        f"schedule: computes {schedule.label()} (skips {len(schedule.skipped)}), worst relative error "
        f"{report.get('error', 0):.4f} within budget {budget:g}; {report.get('candidates_evaluated')} candidates",
    ]
