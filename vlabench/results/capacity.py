"""The capacity search's record (``--robots auto``): every robot count served, whether each robot's p99 passed the
control gate, and at each count the figures a fleet is sized and costed by (mean batch, the device's busy share,
energy per action and dollars per robot-hour, from what that window served)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from vlabench.analysis.cet import ExecutionModel, gate


class CapacityStep(BaseModel):
    robots: int = Field(gt=0)
    passed: bool
    reason: str | None = Field(default=None, description="why the gate failed at this count")
    requests: int = Field(ge=0)
    mean_batch: float = Field(ge=0)
    latency_p50_ms: float = Field(ge=0, description="every robot's requests together")
    worst_p99_ms: float = Field(ge=0, description="the slowest robot's p99")
    busy_fraction: float | None = Field(default=None, ge=0, le=1)
    joules_per_action: float | None = Field(default=None, ge=0)
    usd_per_robot_hour: float | None = Field(default=None, ge=0)


class CapacitySearch(BaseModel):
    """Robot counts served one after another (doubling, then bisecting); the capacity is the largest that passed."""

    arrivals: Literal["closed", "poisson"]
    control_hz: float = Field(gt=0)
    most: int = Field(gt=0, description="the largest count the search could try (--max-robots)")
    capacity_robots: int = Field(ge=0)
    steps: list[CapacityStep]


def robots_gate(
    per_robot_p99_ms: list[float],
    latency_p50_ms: float,
    control_hz: float,
    execution: ExecutionModel,
    problems: list[str],
) -> tuple[bool, str | None]:
    """The per-robot p99 gate: no request failed, was shed or was still unanswered when the window closed (a grace
    at least the gate's budget later: ``problems``), and the slowest robot's p99 passes the control gate; the reason
    when it does not. (An open-loop robot may have asked nothing in a short window.)"""
    if problems:
        return False, "; ".join(problems)
    verdict = gate(latency_p50_ms, max(per_robot_p99_ms), control_hz, execution)
    return verdict.meets_target, verdict.reason
