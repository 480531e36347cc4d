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


Execution = Literal["per-step", "sync", "async"]
EXECUTIONS: tuple[str, ...] = ("per-step", "sync", "async")


class ExecutionModel(BaseModel):
    """How the robot consumes a policy's outputs (README: "The control-rate gate").

    ``per-step`` (the paper's gate, the default): one inference per control step, one action executed from each.
    ``sync``: the robot executes ``actions_per_chunk`` actions at the control rate, then waits for the next
    inference. ``async``: the next inference runs while the current chunk executes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Execution = "per-step"
    actions_per_chunk: int = Field(default=1, ge=1)

    def label(self) -> str:
        return "per-step" if self.mode == "per-step" else f"{self.mode}, {self.actions_per_chunk} actions per chunk"

    @property
    def actions_per_inference(self) -> int:
        return 1 if self.mode == "per-step" else self.actions_per_chunk


class Gate(BaseModel):
    """The control-rate verdict of one latency distribution under one execution model."""

    model_config = ConfigDict(frozen=True)

    execution: ExecutionModel
    control_hz: float
    inference_hz_p50: float
    inference_hz_p99: float
    reaction_ms: float = Field(description="p99 latency: how stale the newest action can be")
    delivered_action_hz: float = Field(description="actions the robot executes per second, at p50 latency")
    delivered_action_hz_p99: float
    meets_target: bool
    reason: str | None = Field(description="why the target is missed (None when met)")


def _delivered_hz(latency_ms: float, control_hz: float, execution: ExecutionModel) -> float:
    seconds = latency_ms / 1000.0
    n = execution.actions_per_chunk
    if execution.mode == "per-step":
        return min(control_hz, 1.0 / seconds)
    if execution.mode == "sync":
        return n / (n / control_hz + seconds)
    return min(control_hz, n / seconds)


def gate(latency_p50_ms: float, latency_p99_ms: float, control_hz: float, execution: ExecutionModel) -> Gate:
    """Per-step: the inference rate at p99 must reach ``control_hz``. Sync: the robot pauses for every inference,
    so a chunk may cost at most one control period of waiting (p99 latency <= 1 / control_hz); its delivered rate
    is N / (N / control_hz + latency). Async: the next chunk must be ready before the current one runs out
    (p99 latency <= N / control_hz)."""
    period_ms = 1000.0 / control_hz
    budget_ms = period_ms * (execution.actions_per_chunk if execution.mode == "async" else 1)
    meets = latency_p99_ms <= budget_ms
    reason = None
    if not meets:
        what = {
            "per-step": f"{1000.0 / latency_p99_ms:.3g} inferences/s at p99 < {control_hz:g} Hz",
            "sync": f"p99 latency {latency_p99_ms:.4g} ms pauses the robot longer than one control period "
            f"({period_ms:.4g} ms) per chunk",
            "async": f"p99 latency {latency_p99_ms:.4g} ms > the chunk's {execution.actions_per_chunk} actions "
            f"at {control_hz:g} Hz ({budget_ms:.4g} ms)",
        }
        reason = what[execution.mode]
    return Gate(
        execution=execution,
        control_hz=control_hz,
        inference_hz_p50=1000.0 / latency_p50_ms,
        inference_hz_p99=1000.0 / latency_p99_ms,
        reaction_ms=latency_p99_ms,
        delivered_action_hz=_delivered_hz(latency_p50_ms, control_hz, execution),
        delivered_action_hz_p99=_delivered_hz(latency_p99_ms, control_hz, execution),
        meets_target=meets,
        reason=reason,
    )


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
