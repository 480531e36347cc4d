"""What a serving window measured, from which a served run's energy and cost per robot follow (``cet.cost_report``
with ``served``): the robots it served, its duration, the device's busy time (the batches as they ran), the
requests, batches and actions delivered, and the joules over the window (the batches' and the idle time between)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

SECONDS_PER_HOUR = 3600.0
JOULES_PER_KWH = 3.6e6
COLUMNS = {
    "robots": "served_robots",
    "window_s": "served_window_s",
    "busy_s": "served_busy_s",
    "requests": "served_requests",
    "batches": "served_batches",
    "actions": "served_actions",
    "joules": "served_joules",
}
"""ServedLoad field → its column in a results frame (``results.aggregate``), from which ``rank`` recomputes."""


class ServedLoad(BaseModel):
    robots: int = Field(gt=0)
    window_s: float = Field(gt=0, allow_inf_nan=False)
    busy_s: float = Field(ge=0, allow_inf_nan=False)
    requests: int = Field(gt=0)
    batches: int = Field(gt=0)
    actions: int = Field(gt=0)
    joules: float = Field(ge=0, allow_inf_nan=False)

    @property
    def busy_fraction(self) -> float:
        """Share of the window the device spent running batches (≤ 1: batches run one after another)."""
        return self.busy_s / self.window_s

    @property
    def rows_per_inference(self) -> float:
        return self.requests / self.batches

    @property
    def actions_per_robot_hour(self) -> float:
        return self.actions / self.window_s * SECONDS_PER_HOUR / self.robots

    @property
    def kwh_per_robot_hour(self) -> float:
        """The window's energy (batches and idle time) per hour, shared by the robots served."""
        return self.joules / self.window_s * SECONDS_PER_HOUR / self.robots / JOULES_PER_KWH

    @property
    def joules_per_action(self) -> float:
        return self.joules / self.actions

    def columns(self) -> dict[str, float]:
        return {column: getattr(self, name) for name, column in COLUMNS.items()}


def served_load(row: Mapping[str, Any]) -> ServedLoad | None:
    """A results-frame row's served load; None for a row that was not served (or has no energy)."""
    values = {name: row.get(column) for name, column in COLUMNS.items()}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values.values()):
        return None
    for name in ("robots", "requests", "batches", "actions"):
        values[name] = int(values[name])
    return ServedLoad(**values)
