"""Task success on result rows: a run of a trained model takes the closed-loop success a fidelity artifact measured
for the same configuration, so a leaderboard can rank (and draw its Pareto front) on speed × success.

The configuration is the model, the device profile, the weights (the checkpoint stamp, path:size:mtime: the same
file), the backend, the precision, the denoising steps and the optimization phrase (``optimization_label``: the
DP-Cache schedule's steps and fused expert K/V; a run with a fused denoise loop has no closed-loop counterpart). Of
several artifacts measuring one configuration, the latest wins. A run of seeded weights never takes a success.

The fields a row gains (``SUCCESS_FIELDS``): ``task_success`` (the rate), ``task_success_low`` and
``task_success_high`` (Wilson 95%), ``task_success_episodes``, ``task_success_below_reference`` (its interval lies
wholly below the fp32 reference's), ``task_success_benchmark`` and ``task_success_source`` (the fidelity run id).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlabench.errors import InputError
from vlabench.results.fidelity_artifact import FidelityReport
from vlabench.results.schema import RunResult
from vlabench.results.store import json_files, survey, validate_artifact
from vlabench.results.task_success import TaskSuccessReport, VariantSuccess, optimization_label

FIDELITY_KIND = "fidelity"
SUCCESS_FIELDS = (
    "task_success",
    "task_success_low",
    "task_success_high",
    "task_success_episodes",
    "task_success_below_reference",
    "task_success_benchmark",
    "task_success_source",
)


@dataclass(frozen=True)
class SuccessCell:
    report: FidelityReport
    success: TaskSuccessReport
    row: VariantSuccess


def load_task_success(paths: Iterable[Path]) -> tuple[list[FidelityReport], list[str]]:
    """Every fidelity artifact with a ``task_success`` block under the given files or folders, and why others that
    claim to be one were skipped (unreadable, or figures that contradict their outcomes)."""
    found, skipped = [], []
    for root in paths:
        for path in json_files(root):
            surveyed = survey(path, FIDELITY_KIND)
            if surveyed.kind != FIDELITY_KIND or surveyed.error is not None:
                continue
            data = surveyed.data
            if not isinstance(data, dict) or not data.get("task_success"):
                continue
            problem = FidelityReport.document_problem(data)
            if problem is not None:
                skipped.append(f"{path}: {problem}")
                continue
            try:
                found.append(validate_artifact(path, data, FidelityReport))
            except InputError as exc:  # a figure that disagrees with its outcomes
                skipped.append(str(exc))
    return found, skipped


def run_configuration(result: RunResult) -> tuple | None:
    """The closed-loop configuration a run measured; None for seeded weights or a fused denoise loop."""
    if result.model.checkpoint is None or result.config.fuse_denoise_loop:
        return None
    optimization = result.optimization
    label = optimization_label(
        optimization.dp_cache if optimization else None, bool(optimization and optimization.fuse_expert_kv)
    )
    return (
        result.model.name,
        result.device.profile,
        result.model.checkpoint,
        result.backend,
        result.precision,
        result.workload.steps,
        label,
    )


def cells(reports: Iterable[FidelityReport]) -> dict[tuple, SuccessCell]:
    """Each measured configuration's success, the latest artifact winning; V-AEFusion rows have no run counterpart."""
    found: dict[tuple, SuccessCell] = {}
    for report in sorted(reports, key=lambda r: r.finished_utc or r.started_utc):
        success = report.task_success
        if success is None:
            continue
        for row in success.variants:
            if row.stale_steps or row.backend is None:
                continue
            key = (
                report.model,
                success.device,
                success.checkpoint,
                row.backend,
                row.precision,
                row.steps,
                row.optimization,
            )
            found[key] = SuccessCell(report, success, row)
    return found


def success_fields(result: RunResult, found: dict[tuple, SuccessCell]) -> dict[str, Any]:
    """The ``SUCCESS_FIELDS`` of a run's row; none when no artifact measured its configuration (a reader takes an
    absent field as None: rows of other models stay as small as they were)."""
    key = run_configuration(result)
    cell = found.get(key) if key is not None else None
    if cell is None:
        return {}
    row = cell.row
    return {
        "task_success": row.success_rate,
        "task_success_low": row.interval[0],
        "task_success_high": row.interval[1],
        "task_success_episodes": row.episodes,
        "task_success_below_reference": row.below_reference,
        "task_success_benchmark": f"{cell.success.benchmark}, {len(cell.success.tasks)} tasks",
        "task_success_source": cell.report.run_id,
    }


def mark_speed_success_front(rows: list[dict[str, Any]], latency: str = "latency_p50_ms") -> None:
    """``speed_success_front`` on every row with a success and a latency: True when no row of the same model and
    device with a success is at least as fast and at least as successful, and strictly better in one."""
    for row in rows:
        if row.get("task_success") is None or row.get(latency) is None:
            continue
        peers = [
            other
            for other in rows
            if other is not row
            and other.get("task_success") is not None
            and other.get(latency) is not None
            and (other.get("model"), other.get("device")) == (row.get("model"), row.get("device"))
        ]
        row["speed_success_front"] = not any(
            other[latency] <= row[latency]
            and other["task_success"] >= row["task_success"]
            and (other[latency] < row[latency] or other["task_success"] > row["task_success"])
            for other in peers
        )
