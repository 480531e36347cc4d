"""The Rich table of ``vlabench loop``."""

from __future__ import annotations

from rich.table import Table

from vlabench.cli.views.tables import titled_table
from vlabench.results.loop_artifact import LoopResult


def loop_table(result: LoopResult) -> Table:
    """Exact vs V-AEFusion control loop (``vlabench loop``)."""
    title = (
        f"Control loop: {result.model} on {result.device} ({result.backend}, {result.precision}), "
        f"{result.cycles} cycles each, {result.concurrency}"
    )
    columns = ["loop", "stale steps", "cycle p50 ms", "p90 ms", "CoV", "actions/s (p50)", "overlap p50 ms"]
    table = titled_table(title, columns, set(columns[1:]))
    for name, variant in (("exact", result.exact), ("V-AEFusion", result.fused)):
        stats = variant.cycle_ms
        table.add_row(
            name,
            str(variant.stale_steps),
            f"{stats.p50:.2f}",
            f"{stats.p90:.2f}",
            f"{stats.cov:.1%}",
            f"{variant.action_hz_p50:.1f}",
            f"{variant.overlap_ms.p50:.2f}",
        )
    table.caption = f"speed-up (exact p50 / fused p50): {result.speedup_p50:.3f}×"
    return table
