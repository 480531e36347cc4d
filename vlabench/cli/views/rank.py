"""The Rich table of ``vlabench rank``."""

from __future__ import annotations

import pandas as pd
from rich.text import Text

from vlabench.cli.views.console import safe
from vlabench.cli.views.tables import FittedTable

# The column each priority orders by, and the order the others are left out in when the terminal is narrow.
PRIORITY_COLUMN = {"cost": "$/1M act", "energy": "J/action", "time": "p99 ms"}
DROP_ORDER = ["p50 ms", "act/s p99", "prec", "J/action", "$/1M act", "p99 ms"]


def rank_table(frame: pd.DataFrame, priority: str, control_hz: float) -> FittedTable:
    """Narrow terminals lose the figures other than the priority's first; the names and the verdict always stay."""
    kept = PRIORITY_COLUMN.get(priority)
    table = FittedTable(
        f"CET ranking by {priority} at {control_hz:g} Hz (feasible rows first; ◆ = Pareto-optimal)",
        [
            "#",
            "model",
            "device",
            "backend",
            "prec",
            "p50 ms",
            "p99 ms",
            "act/s p99",
            "J/action",
            "$/1M act",
            "feasible",
        ],
        {"#", "p50 ms", "p99 ms", "act/s p99", "J/action", "$/1M act"},
        keys={"model", "device", "backend"},
        drop=[column for column in DROP_ORDER if column != kept],
    )
    for row in frame.to_dict("records"):
        joules = row["joules_per_action"]
        estimated = " est" if row["energy_label"] == "estimated" else ""
        energy = f"{joules:.3g}{estimated}" if _present(joules) else "—"
        cost, electricity = row["usd_per_million_actions"], row["usd_per_million_actions_electricity_only"]
        dollars = f"{cost:.4g}" if _present(cost) else f"{electricity:.3g} elec." if _present(electricity) else "—"
        rank_label = str(row["rank"]) if _present(row["rank"]) else ""
        table.add_row(
            rank_label + (" ◆" if row["pareto"] else ""),
            row["model"],
            row["device"],
            row["backend"],
            row["precision"],
            f"{row['latency_p50_ms']:.1f}",
            f"{row['latency_p99_ms']:.1f}",
            f"{row['action_hz_p99']:.1f}",
            energy,
            dollars,
            Text("yes", style="green") if row["feasible"] else safe(f"no: {row['reasons']}", style="red"),
        )
    return table


def _present(value: object) -> bool:
    return value is not None and not pd.isna(value)
