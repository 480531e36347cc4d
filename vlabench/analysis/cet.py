"""CET: Cost, Energy and Time of a result, the feasibility gate and the ranking the leaderboard reuses."""

from __future__ import annotations

from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from vlabench.errors import InputError

Priority = Literal["cost", "energy", "time"]
PRIORITY_COLUMNS: dict[str, str] = {
    "cost": "usd_per_million_actions",
    "energy": "joules_per_action",
    "time": "latency_p50_ms",
}
SECONDS_PER_HOUR = 3600.0
HOURS_PER_YEAR = 8760.0


class CostAssumptions(BaseModel):
    """How purchase price and electricity turn into dollars per action (README: "Cost model")."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    lifetime_years: float = Field(default=3.0, gt=0, description="amortization period of the purchase price")
    duty_cycle: float = Field(default=0.5, gt=0, le=1, description="share of wall time the robot operates")
    electricity_usd_per_kwh: float = Field(default=0.15, ge=0)


class CostReport(BaseModel):
    """Dollars per robot-hour and per million actions at the control rate the robot actually gets."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    assumptions: CostAssumptions
    price_usd: float | None
    price_source: str | None
    price_estimate: bool
    energy_label: Literal["measured", "estimated"]
    actions_per_robot_hour: float
    busy_fraction: float = Field(description="share of each robot-hour the device spends inferring")
    energy_kwh_per_robot_hour: float
    electricity_usd_per_robot_hour: float
    hardware_usd_per_robot_hour: float | None
    basis: Literal["hardware+electricity", "electricity-only"] = Field(
        description="electricity-only when the device has no purchase price (pass --price-usd)"
    )
    usd_per_robot_hour: float
    usd_per_million_actions: float


def delivered_action_hz(control_hz: float, actions_per_chunk: int, latency_p50_ms: float) -> float:
    """The robot acts at its control rate unless the policy cannot keep up (then at the policy's rate)."""
    return min(control_hz, actions_per_chunk * 1000.0 / latency_p50_ms)


def cost_report(
    *,
    price_usd: float | None,
    price_source: str | None,
    price_estimate: bool,
    joules_per_inference: float,
    idle_w: float,
    energy_label: Literal["measured", "estimated"],
    latency_p50_ms: float,
    actions_per_chunk: int,
    control_hz: float,
    assumptions: CostAssumptions,
) -> CostReport:
    """Per robot-hour: inferences at the delivered action rate, idle power between them, amortized hardware."""
    actions_per_hour = delivered_action_hz(control_hz, actions_per_chunk, latency_p50_ms) * SECONDS_PER_HOUR
    inferences_per_hour = actions_per_hour / actions_per_chunk
    busy_s = min(SECONDS_PER_HOUR, inferences_per_hour * latency_p50_ms / 1000.0)
    joules_per_hour = inferences_per_hour * joules_per_inference + (SECONDS_PER_HOUR - busy_s) * idle_w
    kwh = joules_per_hour / 3.6e6
    electricity = kwh * assumptions.electricity_usd_per_kwh
    hardware = None
    if price_usd is not None:
        operating_hours = assumptions.lifetime_years * HOURS_PER_YEAR * assumptions.duty_cycle
        hardware = price_usd / operating_hours
    total = electricity if hardware is None else hardware + electricity
    return CostReport(
        assumptions=assumptions,
        price_usd=price_usd,
        price_source=price_source,
        price_estimate=price_estimate,
        energy_label=energy_label,
        actions_per_robot_hour=actions_per_hour,
        busy_fraction=busy_s / SECONDS_PER_HOUR,
        energy_kwh_per_robot_hour=kwh,
        electricity_usd_per_robot_hour=electricity,
        hardware_usd_per_robot_hour=hardware,
        basis="electricity-only" if hardware is None else "hardware+electricity",
        usd_per_robot_hour=total,
        usd_per_million_actions=total / actions_per_hour * 1e6,
    )


def feasibility(row: pd.Series | dict, control_hz: float) -> tuple[bool, list[str]]:
    """The paper's gate: the model fits the device's memory and sustains the control rate at p99; a row marked
    ``valid: False`` (it failed the correctness gate) fails with its ``invalid_reason`` when the row has one."""
    reasons = []
    memory_gb, needed_gb = row.get("device_memory_gb"), row["memory_needed_gb"]
    if memory_gb is not None and not pd.isna(memory_gb) and needed_gb > memory_gb:
        reasons.append(f"needs {needed_gb:.1f} GB > {memory_gb:g} GB memory")
    action_hz_p99 = row["actions_per_chunk"] * 1000.0 / row["latency_p99_ms"]
    if action_hz_p99 < control_hz:
        reasons.append(f"{action_hz_p99:.1f} actions/s at p99 < {control_hz:g} Hz")
    if not row.get("valid", True):
        reason = row.get("invalid_reason")  # e.g. "failed the correctness gate: relative action error nan"
        reasons.append(reason if isinstance(reason, str) and reason else "failed the correctness gate")
    return not reasons, reasons


def pareto_front(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """True for rows no other row beats on every column (lower is better) and strictly on one."""
    values = frame[columns].to_numpy(dtype=float)
    flags = []
    for i, row in enumerate(values):
        dominated = any((other <= row).all() and (other < row).any() for j, other in enumerate(values) if j != i)
        flags.append(not dominated)
    return pd.Series(flags, index=frame.index)


def pareto_axes(feasible: pd.DataFrame) -> list[str]:
    """Time and energy always; cost too when every feasible row has a full (hardware + electricity) cost."""
    axes = [PRIORITY_COLUMNS["time"], PRIORITY_COLUMNS["energy"]]
    cost = PRIORITY_COLUMNS["cost"]
    return [*axes, cost] if len(feasible) and feasible[cost].notna().all() else axes


def rank(frame: pd.DataFrame, priority: Priority, control_hz: float) -> pd.DataFrame:
    """Gate every row at ``control_hz``, then order the feasible ones by the priority; infeasible rows follow.

    ``frame`` needs: latency_p50_ms, latency_p99_ms, actions_per_chunk, memory_needed_gb, device_memory_gb,
    joules_per_action, usd_per_million_actions (NaN where no full cost is known) and optionally valid and
    invalid_reason.
    Adds feasible, reasons, pareto (among feasible rows, see ``pareto_axes``) and rank.
    """
    if priority not in PRIORITY_COLUMNS:
        raise InputError(f"Unknown priority '{priority}'. Valid priorities: {', '.join(PRIORITY_COLUMNS)}.")
    frame = frame.copy()
    gates = [feasibility(row, control_hz) for _, row in frame.iterrows()]
    frame["feasible"] = [ok for ok, _ in gates]
    frame["reasons"] = ["; ".join(reasons) for _, reasons in gates]
    key = PRIORITY_COLUMNS[priority]
    frame["pareto"] = False
    axes = pareto_axes(frame[frame["feasible"]])
    comparable = frame["feasible"] & frame[axes].notna().all(axis=1)
    if comparable.any():
        frame.loc[comparable, "pareto"] = pareto_front(frame[comparable], axes)
    ranked = frame["feasible"] & frame[key].notna()
    frame["rank"] = pd.NA
    order = frame[ranked].sort_values([key, "latency_p50_ms"]).index
    frame.loc[order, "rank"] = range(1, len(order) + 1)
    frame["_sort"] = frame["rank"].fillna(len(frame) + 1)
    return frame.sort_values(["_sort", key], na_position="last").drop(columns="_sort").reset_index(drop=True)
