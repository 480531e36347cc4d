"""The Rich table of ``vlabench rank``."""

from __future__ import annotations

import pandas as pd
from rich.text import Text

from vlabench.cli.views.console import safe
from vlabench.cli.views.tables import FittedTable

# The column each priority orders by, and the order the others are left out in when the terminal is narrow.
PRIORITY_COLUMN = {"cost": "$/1M act", "energy": "J/action", "time": "p50 ms"}
DROP_ORDER = [
    *("inf/s p99", "execution", "act/s", "prec", "error", "source", "$/robot-h", "J/action", "$/1M act"),
    *("p50 ms", "reaction ms"),
]
NUMBERS = {"#", "p50 ms", "reaction ms", "inf/s p99", "act/s", "error", "J/action", "$/1M act", "$/robot-h"}


def rank_table(frame: pd.DataFrame, priority: str, control_hz: float, question: str) -> FittedTable:
    """One question's rows. Narrow terminals lose the figures other than the priority's first; the names and the
    verdict always stay. Ranks are numbered within their group: approximate rows (lossy optimizations or precision)
    carry "≈" and their action error; "=" marks rows not ranked apart (equal figures, or overlapping bands)."""
    kept = PRIORITY_COLUMN.get(priority)
    columns = ["#", "model", "device", "backend", "prec", "p50 ms", "reaction ms", "inf/s p99", "execution"]
    table = FittedTable(
        f"{question}: CET ranking by {priority} at {control_hz:g} Hz (feasible rows first; exact rows, then ≈ "
        "approximate rows ranked apart; = not ranked apart; ◆ = Pareto-optimal in its group)",
        [*columns, "act/s", "error", "J/action", "$/1M act", "$/robot-h", "source", "feasible"],
        NUMBERS,
        keys={"model", "device", "backend"},
        drop=[column for column in DROP_ORDER if column != kept],
    )
    for row in frame.to_dict("records"):
        joules = row["joules_per_action"]
        estimated = " est" if row["energy_label"] == "estimated" else ""
        energy = f"{joules:.3g}{estimated}" if _present(joules) else "—"
        cost, electricity = row["usd_per_million_actions"], row["usd_per_million_actions_electricity_only"]
        dollars = f"{cost:.4g}" if _present(cost) else f"{electricity:.3g} elec." if _present(electricity) else "—"
        if row.get("cost_basis") == "electricity-only" and _present(electricity):
            dollars = f"{electricity:.3g} elec."  # the group is ranked on electricity: show what was compared
        hour = row.get("usd_per_robot_hour")
        if row.get("cost_basis") == "electricity-only" or not _present(hour):
            hour = row.get("usd_per_robot_hour_electricity_only")
            per_hour = f"{hour:.3g} elec." if _present(hour) else "—"
        else:
            per_hour = f"{hour:.3g}"
        approximate = bool(row.get("approximate"))
        rank_label = ("≈" if approximate else "") + (str(int(row["rank"])) if _present(row["rank"]) else "")
        rank_label += "=" if row.get("tied") else ""
        band = row.get("error_band")
        source = row.get("provenance", "measured") + (f" ±{band * 100:.0f}%" if _present(band) else "")
        device = row["device"] + (
            f" ({row['deployment']} ×{row['robots']})" if row.get("deployment", "on-robot") != "on-robot" else ""
        )
        error = row.get("action_error")
        execution = "per-step" if row["execution"] == "per-step" else f"{row['execution']} ×{row['actions_per_chunk']}"
        table.add_row(
            rank_label + (" ◆" if row["pareto"] else ""),
            row["model"],
            device,
            row["backend"],
            row["precision"],
            f"{row['latency_p50_ms']:.1f}",
            f"{row['reaction_ms']:.1f}",
            f"{row['inference_hz_p99']:.3g}",
            execution,
            f"{row['delivered_action_hz']:.3g}",
            f"{error:.2g}" if _present(error) else "—",
            energy,
            dollars,
            per_hour,
            source,
            Text("yes", style="green") if row["feasible"] else safe(f"no: {row['reasons']}", style="red"),
        )
    return table


def _present(value: object) -> bool:
    return value is not None and not pd.isna(value)
