"""CET: Cost, Energy and Time of a result, the feasibility gate and the ranking the leaderboard reuses.

The gate (README and docs/measurement.md: "The control-rate gate") judges a latency distribution under an execution
model: per-step (the paper's: one inference per control step), or chunked, synchronously or asynchronously. Energy and
cost per action follow the same model. Rows whose actions are approximate (``is_lossy``) rank in a group of their own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from vlabench.analysis.execution import EXECUTIONS, Execution, ExecutionModel, Gate, delivered_hz, gate
from vlabench.analysis.served_cost import SECONDS_PER_HOUR, ServedLoad, served_load
from vlabench.errors import InputError
from vlabench.measure.correctness import TOLERANCES
from vlabench.vocab import Precision

Priority = Literal["cost", "energy", "time"]
PRIORITY_COLUMNS: dict[str, str] = {
    "cost": "usd_per_million_actions",
    "energy": "joules_per_action",
    "time": "latency_p50_ms",
}
__all__ = [  # the gate lives in analysis/execution.py; readers import it from here too
    "EXECUTIONS",
    "CostAssumptions",
    "CostReport",
    "Execution",
    "ExecutionModel",
    "Gate",
    "action_costs",
    "cost_report",
    "delivered_hz",
    "feasibility",
    "gate",
    "gate_rows",
    "is_lossy",
    "pareto_axes",
    "pareto_front",
    "rank",
]
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
    execution: ExecutionModel | None = Field(
        default=None, description="how actions are executed (None: written before schema 1.2, chunked)"
    )
    actions_per_robot_hour: float
    busy_fraction: float = Field(description="share of each robot-hour the device spends inferring")
    robots_per_device: float = Field(
        default=1.0, gt=0, description="robots one device serves (a batch, or --robots): its hour is shared by them"
    )
    rows_per_inference: float = Field(
        default=1.0, gt=0, description="robots' observations per inference (the batch, or the served mean batch)"
    )
    energy_kwh_per_robot_hour: float
    electricity_usd_per_robot_hour: float
    hardware_usd_per_robot_hour: float | None
    basis: Literal["hardware+electricity", "electricity-only"] = Field(
        description="electricity-only when the device has no purchase price (pass --price-usd)"
    )
    usd_per_robot_hour: float
    usd_per_million_actions: float
    joules_per_action: float | None = Field(
        default=None, description="a robot's energy per action, the electricity's basis (None before schema 1.6)"
    )


def cost_report(
    *,
    price_usd: float | None,
    price_source: str | None,
    price_estimate: bool,
    joules_per_inference: float,
    idle_w: float,
    energy_label: Literal["measured", "estimated"],
    latency_p50_ms: float,
    control_hz: float,
    execution: ExecutionModel,
    assumptions: CostAssumptions,
    robots_per_device: float = 1.0,
    rows_per_inference: float = 1.0,
    served: ServedLoad | None = None,
) -> CostReport:
    """Per robot-hour: inferences at the action rate the execution model delivers at p50 (``gate``), idle power
    between them, amortized hardware. A device serving ``robots_per_device`` robots, ``rows_per_inference`` of them
    per inference (a batch), runs one inference per that many robot requests, and its idle time and hardware are
    shared among all of them. A served run (``served``) is costed from what its window measured instead: actions
    delivered, the device's busy share, the window's energy (batches and idle time) shared by its robots."""
    if served is None:
        actions_per_hour = delivered_hz(latency_p50_ms, control_hz, execution) * SECONDS_PER_HOUR
        inferences_per_hour = actions_per_hour / execution.actions_per_inference / rows_per_inference
        busy_s = min(SECONDS_PER_HOUR, inferences_per_hour * latency_p50_ms / 1000.0)
        idle_s = max(0.0, SECONDS_PER_HOUR / robots_per_device - busy_s)
        kwh = (inferences_per_hour * joules_per_inference + idle_s * idle_w) / 3.6e6
        busy, per_action = busy_s / SECONDS_PER_HOUR, joules_per_inference / actions_per_hour * inferences_per_hour
    else:
        actions_per_hour, busy, kwh = served.actions_per_robot_hour, served.busy_fraction, served.kwh_per_robot_hour
        robots_per_device, rows_per_inference = served.robots, served.rows_per_inference
        per_action = served.joules_per_action
    electricity = kwh * assumptions.electricity_usd_per_kwh
    hardware = None
    if price_usd is not None:
        operating_hours = assumptions.lifetime_years * HOURS_PER_YEAR * assumptions.duty_cycle
        hardware = price_usd / operating_hours / robots_per_device
    total = electricity if hardware is None else hardware + electricity
    return CostReport(
        assumptions=assumptions,
        price_usd=price_usd,
        price_source=price_source,
        price_estimate=price_estimate,
        energy_label=energy_label,
        execution=execution,
        actions_per_robot_hour=actions_per_hour,
        busy_fraction=busy,
        robots_per_device=robots_per_device,
        rows_per_inference=rows_per_inference,
        energy_kwh_per_robot_hour=kwh,
        electricity_usd_per_robot_hour=electricity,
        hardware_usd_per_robot_hour=hardware,
        basis="electricity-only" if hardware is None else "hardware+electricity",
        usd_per_robot_hour=total,
        usd_per_million_actions=total / actions_per_hour * 1e6,
        joules_per_action=per_action,
    )


COST_INPUTS = ("joules_per_inference", "idle_w", "price_usd", "lifetime_years", "duty_cycle", "electricity_usd_per_kwh")
"""The columns from which ``rank`` recomputes energy and cost per action under its execution model."""


def action_costs(
    latency_p50_ms: float,
    control_hz: float,
    execution: ExecutionModel,
    joules_per_inference: float,
    idle_w: float,
    price_usd: float | None,
    assumptions: CostAssumptions,
    robots_per_device: float = 1.0,
    rows_per_inference: float = 1.0,
    served: ServedLoad | None = None,
) -> dict[str, float | None]:
    """joules_per_action, usd_per_million_actions and usd_per_robot_hour (None without a price) and their
    electricity-only parts, per action the execution model executes and per robot-hour (per robot, for a device
    serving several; a served run's from its window), from ``cost_report``."""
    common = dict(served=served, robots_per_device=robots_per_device, rows_per_inference=rows_per_inference)
    common.update(price_source=None, price_estimate=False, joules_per_inference=joules_per_inference, idle_w=idle_w)
    common.update(energy_label="measured", latency_p50_ms=latency_p50_ms, control_hz=control_hz)
    common.update(execution=execution, assumptions=assumptions)
    electricity = cost_report(price_usd=None, **common)
    full = cost_report(price_usd=price_usd, **common) if price_usd is not None else None
    return {
        "joules_per_action": electricity.joules_per_action,
        "usd_per_million_actions": full.usd_per_million_actions if full else None,
        "usd_per_million_actions_electricity_only": electricity.usd_per_million_actions,
        "usd_per_robot_hour": full.usd_per_robot_hour if full else None,
        "usd_per_robot_hour_electricity_only": electricity.usd_per_robot_hour,
    }


FP32_TOLERANCE = TOLERANCES[Precision.REFERENCE].max_relative_error


def is_lossy(
    *,
    precision: str,
    action_error: float | None,
    dp_cache: bool = False,
    fusion_stale_steps: int = 0,
    fp32_tolerance: float = FP32_TOLERANCE,
) -> bool:
    """Whether a row's actions are approximate, so that it ranks apart from exact rows: DP-Cache (reuses steps) and
    V-AEFusion (``fusion_stale_steps`` > 0: stale prefix K/V) change what is computed; int8/int4 quantize the
    weights; any other precision than fp32 is approximate unless its relative action error against torch fp32 is
    within the fp32 gate's tolerance (a missing or non-finite error counts as past it). fp32 rows are exact (an
    fp32 row past the tolerance fails the correctness gate and is never ranked)."""
    if dp_cache or fusion_stale_steps > 0 or Precision.is_quantized(precision):
        return True
    if precision == Precision.REFERENCE:
        return False
    return not _number(action_error) or action_error > fp32_tolerance


def _number(value: Any) -> bool:
    """A finite number (not None, NA, NaN or ±inf)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def row_execution(row: Mapping[str, Any], execution: ExecutionModel | None = None) -> ExecutionModel:
    """``execution`` when given, else the row's own (columns ``execution`` and ``actions_per_chunk``; per-step
    when absent)."""
    if execution is not None:
        return execution
    mode = row.get("execution")
    if not isinstance(mode, str) or mode == "per-step":
        return ExecutionModel()
    return ExecutionModel(mode=mode, actions_per_chunk=int(row["actions_per_chunk"]))


def feasibility(
    row: Mapping[str, Any], control_hz: float, execution: ExecutionModel | None = None
) -> tuple[Gate, list[str]]:
    """The paper's gate under an execution model (``row_execution``): the model fits the device's usable memory,
    the control gate (``gate``) holds at p99, a chunked execution executes no more actions than the model predicts
    (column ``chunk``, when present), and the row passed the correctness gate (``valid``; its ``invalid_reason``
    when it has one). Returns the control gate and every failed condition (feasible: none)."""
    model = row_execution(row, execution)
    verdict = gate(row["latency_p50_ms"], row["latency_p99_ms"], control_hz, model)
    reasons = []
    usable, needed = row.get("device_memory_gb"), row["memory_needed_gb"]
    if _number(usable) and needed > usable:
        nameplate = row.get("device_memory_nameplate_gb")
        shown = f" ({nameplate:g} GB nameplate)" if _number(nameplate) and nameplate != usable else ""
        reasons.append(f"needs {needed:.1f} GB > {usable:g} GB usable memory{shown}")
    chunk = row.get("chunk")
    if model.mode != "per-step" and _number(chunk) and model.actions_per_chunk > chunk:
        reasons.append(f"executes {model.actions_per_chunk} actions per chunk, the model predicts {int(chunk)}")
    if verdict.reason:
        reasons.append(verdict.reason)
    if not row.get("valid", True):
        reason = row.get("invalid_reason")  # e.g. "failed the correctness gate: relative action error nan"
        reasons.append(reason if isinstance(reason, str) and reason else "failed the correctness gate")
    return verdict, reasons


def pareto_front(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """True for rows no other row beats on every column (lower is better) and strictly on one."""
    values = frame[columns].to_numpy(dtype=float)
    others, rows = values[None, :, :], values[:, None, :]  # [i, j]: row j against row i
    dominated = ((others <= rows).all(axis=2) & (others < rows).any(axis=2)).any(axis=1)
    return pd.Series(~dominated, index=frame.index)


def pareto_axes(feasible: pd.DataFrame) -> list[str]:
    """Time and energy always; cost too when every feasible row has a full (hardware + electricity) cost."""
    axes = [PRIORITY_COLUMNS["time"], PRIORITY_COLUMNS["energy"]]
    cost = PRIORITY_COLUMNS["cost"]
    return [*axes, cost] if len(feasible) and feasible[cost].notna().all() else axes


GATE_COLUMNS = (
    *("execution", "actions_per_chunk", "inference_hz_p50", "inference_hz_p99", "reaction_ms"),
    *("delivered_action_hz", "delivered_action_hz_p99", "meets_target"),
)
ELECTRICITY_ONLY = "usd_per_million_actions_electricity_only"


def shared(row: dict[str, Any], column: str) -> float:
    """A row's ``robots_per_device`` or ``rows_per_inference``: 1 when the row has none (one robot per device)."""
    value = row.get(column)
    return float(value) if _number(value) and value > 0 else 1.0


def gate_rows(frame: pd.DataFrame, control_hz: float, execution: ExecutionModel | None) -> pd.DataFrame:
    """``frame`` with the gate columns (``GATE_COLUMNS``), feasible and reasons of every row (``feasibility``), and
    energy and cost per action recomputed under each row's execution model where it has the ``COST_INPUTS``."""
    records = []
    for row in frame.to_dict("records"):
        verdict, reasons = feasibility(row, control_hz, execution)
        model = verdict.execution
        record = {
            "execution": model.mode,
            "actions_per_chunk": model.actions_per_inference,
            "inference_hz_p50": verdict.inference_hz_p50,
            "inference_hz_p99": verdict.inference_hz_p99,
            "reaction_ms": verdict.reaction_ms,
            "delivered_action_hz": verdict.delivered_action_hz,
            "delivered_action_hz_p99": verdict.delivered_action_hz_p99,
            "meets_target": verdict.meets_target,
            "feasible": not reasons,
            "reasons": "; ".join(reasons),
        }
        if all(name in row for name in COST_INPUTS) and _number(row["joules_per_inference"]):
            assumptions = CostAssumptions(
                lifetime_years=row["lifetime_years"],
                duty_cycle=row["duty_cycle"],
                electricity_usd_per_kwh=row["electricity_usd_per_kwh"],
            )
            price = row["price_usd"] if _number(row["price_usd"]) else None
            record.update(
                action_costs(
                    row["latency_p50_ms"],
                    control_hz,
                    model,
                    row["joules_per_inference"],
                    row["idle_w"],
                    price,
                    assumptions,
                    shared(row, "robots_per_device"),
                    shared(row, "rows_per_inference"),
                    served_load(row),
                )
            )
        records.append(record)
    updates = pd.DataFrame(records, index=frame.index)
    frame = frame.copy()
    for column in updates.columns:
        frame[column] = updates[column]
    return frame


def rank(
    frame: pd.DataFrame,
    priority: Priority,
    control_hz: float,
    execution: ExecutionModel | None = None,
    approximate_separately: bool = True,
) -> pd.DataFrame:
    """Gate every row at ``control_hz`` (``feasibility``), then order the feasible ones by the priority, group by
    group; unranked rows follow.

    ``frame`` needs latency_p50_ms, latency_p99_ms, memory_needed_gb, joules_per_action and usd_per_million_actions
    (NaN where no full cost is known); it may have execution and actions_per_chunk (each row's execution model, per
    step when absent), device_memory_gb (usable) and device_memory_nameplate_gb, chunk, approximate, valid,
    invalid_reason, usd_per_million_actions_electricity_only and the ``COST_INPUTS`` (``results_frame`` writes all).
    ``execution``: judge every row under this model instead of its own. Energy and cost per action are recomputed
    under the judged model at ``control_hz`` for rows with the cost inputs.

    Rows with ``approximate`` true form the group "approximate", the others "exact" (column ``group``); with
    ``approximate_separately`` (the default) each group has its own rank numbering from 1 and its own Pareto set,
    exact rows first. Ranking by cost compares like with like: the full cost when at least as many feasible rows of
    the group have it as have an electricity-only cost (every row with energy has one), else the electricity-only
    cost, so that a device without a purchase price never empties the ranking (column ``cost_basis``:
    "hardware+electricity" or "electricity-only", the basis of the row's group; None for rows with no such cost).
    Adds the gate columns (``GATE_COLUMNS``), feasible, reasons, group, cost_basis, pareto (among the group's
    feasible rows, see ``pareto_axes``) and rank.
    """
    if priority not in PRIORITY_COLUMNS:
        raise InputError(f"Unknown priority '{priority}'. Valid priorities: {', '.join(PRIORITY_COLUMNS)}.")
    frame = gate_rows(frame.reset_index(drop=True), control_hz, execution)
    if ELECTRICITY_ONLY not in frame:
        frame[ELECTRICITY_ONLY] = None
    approximate = frame["approximate"] if "approximate" in frame else pd.Series(False, index=frame.index)
    frame["approximate"] = approximate.fillna(False).astype(bool)
    frame["group"] = frame["approximate"].map({True: "approximate", False: "exact"})
    frame["pareto"] = False
    frame["rank"] = pd.NA
    frame["cost_basis"] = None
    frame["_key"] = math.inf
    groups = frame["group"] if approximate_separately else pd.Series("all", index=frame.index)
    for _, members in frame.groupby(groups, sort=False):
        _rank_group(frame, members.index, priority)
    frame["_ranked"] = frame["rank"].isna()
    frame["_order"] = frame["approximate"] if approximate_separately else False
    order = ["_ranked", "_order", "rank", "_key", "latency_p50_ms"]
    ranked = frame.sort_values(order, na_position="last", kind="stable")
    return ranked.drop(columns=["_key", "_ranked", "_order"]).reset_index(drop=True)


def _rank_group(frame: pd.DataFrame, index: pd.Index, priority: str) -> None:
    """Cost basis, Pareto set and rank numbering of one group, written into ``frame``."""
    members = frame.loc[index]
    feasible = members[members["feasible"]]
    costed = feasible[PRIORITY_COLUMNS["cost"]].notna().sum()
    full = costed >= feasible[ELECTRICITY_ONLY].notna().sum()
    cost_column = PRIORITY_COLUMNS["cost"] if full else ELECTRICITY_ONLY
    has_cost = members[cost_column].notna()
    frame.loc[index[has_cost.to_numpy()], "cost_basis"] = "hardware+electricity" if full else "electricity-only"
    key = cost_column if priority == "cost" else PRIORITY_COLUMNS[priority]
    frame.loc[index, "_key"] = pd.to_numeric(members[key], errors="coerce").fillna(math.inf)
    axes = pareto_axes(feasible)
    comparable = feasible[feasible[axes].notna().all(axis=1)]
    if len(comparable):
        frame.loc[comparable.index, "pareto"] = pareto_front(comparable, axes)
    rankable = feasible[pd.to_numeric(feasible[key], errors="coerce").notna()]
    order = rankable.sort_values([key, "latency_p50_ms"], kind="stable").index
    frame.loc[order, "rank"] = range(1, len(order) + 1)
