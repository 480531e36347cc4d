"""A served window's energy and cost per robot, from what ran: the window's joules (an energy meter read over the
window, or the energy pass's power over each batch's time and idle power between them) shared over the batches by
their duration and over the idle time, then ``cet.cost_report`` on the window's load. One joules-per-action and one
dollars-per-robot-hour per served result, wherever it is shown."""

from __future__ import annotations

from typing import Literal, NamedTuple

from vlabench.analysis.cet import CostAssumptions, CostReport, ExecutionModel, cost_report
from vlabench.results.capacity import CapacityStep, robots_gate
from vlabench.results.serving import ServingResult
from vlabench.results.serving_parts import ServedEnergy, share_energy


def with_energy(
    serving: ServingResult, *, label: Literal["measured", "estimated"], method: str, joules: float, idle_w: float
) -> ServingResult:
    """The serving block with the window's ``joules`` shared over its batches and idle time, and per action."""
    if serving.batch_log is None or not serving.requests:
        return serving
    log, idle = share_energy(serving.batch_log, joules, idle_w, serving.duration_s)
    energy = ServedEnergy(
        label=label, method=method, window_s=serving.duration_s, joules=joules, idle_w=idle_w, idle_joules=idle
    )
    per_action = joules / (serving.requests * serving.actions_per_request)
    return serving.model_copy(update={"batch_log": log, "energy": energy, "joules_per_action": per_action})


def modelled_joules(serving: ServingResult, busy_w: float, idle_w: float) -> float:
    """The window's joules from power while inferring over the batches' time and idle power over the rest."""
    busy_s = serving.batch_log.busy_s if serving.batch_log else 0.0
    return busy_w * busy_s + idle_w * max(0.0, serving.duration_s - busy_s)


class Pricing(NamedTuple):
    """What a device costs and how that cost is spread over its use: the ``cost_report`` terms a result keeps."""

    price_usd: float | None
    price_source: str | None
    price_estimate: bool
    assumptions: CostAssumptions

    @classmethod
    def of(cls, cost: CostReport) -> Pricing:
        return cls(cost.price_usd, cost.price_source, cost.price_estimate, cost.assumptions)


def served_cost(
    serving: ServingResult, pricing: Pricing, control_hz: float, execution: ExecutionModel
) -> CostReport | None:
    """Dollars and joules per robot from the window's load (None without its energy)."""
    load, energy = serving.load(), serving.energy
    if load is None or energy is None:
        return None
    return cost_report(
        **pricing._asdict(),
        joules_per_inference=energy.joules / load.batches,
        idle_w=energy.idle_w,
        energy_label=energy.label,
        latency_p50_ms=serving.latency.p50,
        control_hz=control_hz,
        execution=execution,
        served=load,
    )


def capacity_step(
    serving: ServingResult, cost: CostReport | None, control_hz: float, execution: ExecutionModel
) -> CapacityStep:
    """One count of the search: the per-robot p99 gate on what it served, and its figures."""
    problems = []
    if serving.failures:
        problems.append(f"{len(serving.failures)} robot(s) failed: {serving.failures[0]}")
    if serving.shed:
        problems.append(f"{serving.shed} request(s) shed: the server fell behind the arrivals")
    if serving.unfinished:
        problems.append(f"{serving.unfinished} request(s) unanswered when the window closed")
    if serving.stopped and not serving.failures:
        problems.append(serving.stopped)
    per_robot = [robot.latency_p99_ms for robot in serving.per_robot]
    passed, reason = robots_gate(per_robot, serving.latency.p50, control_hz, execution, problems)
    return CapacityStep(
        robots=serving.robots,
        passed=passed,
        reason=reason,
        requests=serving.requests,
        mean_batch=serving.mean_batch,
        latency_p50_ms=serving.latency.p50,
        worst_p99_ms=max(per_robot),
        busy_fraction=serving.busy_fraction,
        joules_per_action=serving.joules_per_action,
        usd_per_robot_hour=cost.usd_per_robot_hour if cost else None,
    )
