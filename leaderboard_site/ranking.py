"""The site's rows ranked at one target and execution model by ``cet.rank`` (which regates every row and recomputes
energy and cost per action from the ``cet.COST_INPUTS`` columns), each provenance class apart: measured runs,
roofline projections, published figures; within each, exact and approximate rows apart. ``assets/leaderboard.js``
recomputes the same in the page at the reader's settings."""

from __future__ import annotations

from typing import Any

import pandas as pd

from vlabench.analysis.cet import ExecutionModel, Priority, rank

from .rows import clean

CLASSES = ("run", "projected", "reported")
"""Ranking classes in page order: measured (and estimated-energy) runs, roofline projections, published figures."""
GROUPS = ("exact", "approximate")
FIGURES = dict.fromkeys(("joules_per_action", "usd_per_million_actions", "usd_per_million_actions_electricity_only"))
"""The figures ``cet.rank`` needs as columns (it fills them in from the cost inputs where a row has them)."""


def rank_rows(
    rows: list[dict[str, Any]], priority: Priority, control_hz: float, execution: ExecutionModel
) -> list[dict[str, Any]]:
    """Every row gated and ranked by ``cet.rank`` within its class; in page order: the ranked rows class by class
    and group by group, then the unranked ones (infeasible, or without the priority's figure) in the same order."""
    ranked, rest = [], []
    for kind in CLASSES:
        members = [{**FIGURES, **row} for row in rows if row["kind"] == kind]
        if not members:
            continue
        frame = rank(pd.DataFrame(members), priority, control_hz, execution=execution, approximate_separately=True)
        for record in frame.to_dict(orient="records"):
            row = {key: clean(value) for key, value in record.items()}
            row.update(
                rank=None if row["rank"] is None else int(row["rank"]),
                pareto=bool(row["pareto"]),
                feasible=bool(row["feasible"]),
                execution=execution.label(),
            )
            (ranked if row["rank"] is not None else rest).append(row)
    order = {(kind, group): i for i, (kind, group) in enumerate((k, g) for k in CLASSES for g in GROUPS)}
    ranked.sort(key=lambda row: (order[row["kind"], row["group"]], row["rank"]))
    rest.sort(key=lambda row: order[row["kind"], row["group"]])  # stable: cet.rank's order within a group
    return ranked + rest
