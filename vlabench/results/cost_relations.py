"""The control verdict and the cost, each recomputed from the latency the robots saw, the settings and the energy.

The control block is the gate of the recorded latency. The cost is ``cet.cost_report`` run again on the recorded
inputs (price, lifetime, duty, electricity price, energy per inference, idle power, the robot's p50 latency, the
control rate and execution model, the robots sharing the device and the rows per inference): every figure it
derives is compared, so a forged hardware $/h, busy fraction or action count is refused. Results older than the
cost model of schema 1.5 keep the identities that every version held.
"""

from __future__ import annotations

from vlabench.analysis.cet import HOURS_PER_YEAR, CostReport, cost_report, gate
from vlabench.results.relation_terms import EXACT, Problems, RunResult, close
from vlabench.results.serving_energy import Pricing, served_cost

MODEL_SCHEMA = (1, 5)
"""The first schema whose cost the present model recomputes (robots sharing a device, rows per inference)."""
DERIVED = (
    "actions_per_robot_hour",
    "busy_fraction",
    "energy_kwh_per_robot_hour",
    "electricity_usd_per_robot_hour",
    "hardware_usd_per_robot_hour",
    "usd_per_robot_hour",
    "usd_per_million_actions",
)
"""The figures ``cost_report`` derives, compared with the recorded ones."""
COST = 1e-6
"""Recomputed cost figures agree to this relative share (the same formula, floats rounded once more)."""


def control_relations(result: RunResult) -> Problems:
    """The control block's rates, reaction delay and verdict are the gate of the recorded end-to-end percentiles (a
    served run's: of the latency its robots saw)."""
    control = result.control
    e2e = result.serving.latency if result.serving else result.timing.phases.get("e2e")
    if e2e is None or control.regated_from is not None:
        return []
    judged = e2e.judged_p99()[0]
    verdict = gate(e2e.p50, judged, control.control_hz, control.execution_model())
    pairs = (
        ("inference_hz_p50", verdict.inference_hz_p50),
        ("inference_hz_p99", verdict.inference_hz_p99),
        ("reaction_ms", verdict.reaction_ms),
        ("delivered_action_hz_p50", verdict.delivered_action_hz),
        ("delivered_action_hz_p99", verdict.delivered_action_hz_p99),
    )
    found = [
        (
            f"control.{field}",
            f"throughput from latency: {getattr(control, field):g} recorded, {expected:g} from the end-to-end "
            f"p50 {e2e.p50:g} ms and the judged {judged:g} ms",
        )
        for field, expected in pairs
        if not close(getattr(control, field), expected, EXACT)
    ]
    if control.meets_target != verdict.meets_target:
        said = "meets" if control.meets_target else "misses"
        found.append(
            (
                "control.meets_target",
                f"throughput from latency: the verdict {said} the {control.control_hz:g} Hz target, the gate of the "
                f"judged {judged:g} ms does not",
            )
        )
    return found


def cost_relations(result: RunResult) -> Problems:
    """The cost is the cost model of the recorded inputs; in every schema, $/M actions = $/h ÷ actions/h, $/h =
    hardware + electricity, electricity = kWh × its price, hardware = price ÷ (lifetime × duty hours) ÷ robots, and
    the device is busy at most all of the hour."""
    cost = result.cost
    if cost is None:
        return []
    found = _identity_problems(result)
    if found or _schema(result) < MODEL_SCHEMA or result.energy is None:
        return found
    sharing = (result.serving.robots, result.serving.mean_batch) if result.serving else (result.workload.batch,) * 2
    for field, recorded, expected in (
        ("robots_per_device", cost.robots_per_device, sharing[0]),
        ("rows_per_inference", cost.rows_per_inference, sharing[1]),
    ):
        if not close(recorded, expected, EXACT):
            found.append(
                (
                    f"cost.{field}",
                    f"cost model: {field} {recorded:g} recorded, the run's robots and batch give {expected:g}",
                )
            )
    execution = result.control.execution_model()
    if cost.execution is not None and cost.execution != execution:
        found.append(("cost.execution", f"cost model: costed {cost.execution.label()}, gated {execution.label()}"))
    if found or _served_before_its_window(result):
        return found
    expected = model_cost(result)
    for field in DERIVED:
        recorded, computed = getattr(cost, field), getattr(expected, field)
        if (recorded is None) != (computed is None) or (
            recorded is not None and not close(recorded, computed, 0, COST)
        ):
            return [
                (
                    f"cost.{field}",
                    f"cost model: {field} {_shown(recorded)} recorded, {_shown(computed)} from the price, lifetime, "
                    f"duty, energy and the robots' p50 {result.robot_latency.p50:g} ms",
                )
            ]
    return []


def _served_before_its_window(result: RunResult) -> bool:
    """A served result without its window's batch log and energy (schema 1.5): its cost was drawn from the robots'
    measured rates, which the cost model cannot recompute; only the identities hold it."""
    return result.serving is not None and result.serving.load() is None


def model_cost(result: RunResult) -> CostReport:
    """The cost model (``cet.cost_report``) run on the result's recorded inputs: its cost's price, assumptions,
    execution and sharing, its energy, control rate and the latency its robots saw; a served run's from what its
    window measured (``serving_energy.served_cost``), as ``assemble`` costs it."""
    cost, energy = result.cost, result.energy
    served = result.serving
    if served is not None and served.load() is not None:
        window = served_cost(served, Pricing.of(cost), result.control.control_hz, result.control.execution_model())
        if window is not None:
            return window
    return cost_report(
        **Pricing.of(cost)._asdict(),
        joules_per_inference=energy.joules_per_inference,
        idle_w=energy.idle_w,
        energy_label=energy.label,
        latency_p50_ms=result.robot_latency.p50,
        control_hz=result.control.control_hz,
        execution=result.control.execution_model(),
        robots_per_device=cost.robots_per_device,
        rows_per_inference=cost.rows_per_inference,
    )


def _identity_problems(result: RunResult) -> Problems:
    cost, found = result.cost, []
    if not 0 <= cost.busy_fraction <= 1:
        found.append(("cost.busy_fraction", f"busy at most all of the hour: a busy fraction of {cost.busy_fraction:g}"))
    if cost.price_usd != result.device.price_usd:
        found.append(
            (
                "cost.price_usd",
                f"cost model: costed at a price of {_shown(cost.price_usd)} $, the device's is "
                f"{_shown(result.device.price_usd)} $",
            )
        )
    assumptions = cost.assumptions
    if cost.price_usd is None:
        hardware = None
    else:
        hours = assumptions.lifetime_years * HOURS_PER_YEAR * assumptions.duty_cycle
        hardware = cost.price_usd / hours / cost.robots_per_device
    recorded = cost.hardware_usd_per_robot_hour
    if (recorded is None) != (hardware is None) or (recorded is not None and not close(recorded, hardware, EXACT)):
        found.append(
            (
                "cost.hardware_usd_per_robot_hour",
                f"hardware cost = price / operating hours: {_shown(recorded)} $/h recorded, "
                f"{_shown(cost.price_usd)} $ over {assumptions.lifetime_years:g} y x {assumptions.duty_cycle:g} duty "
                f"shared by {cost.robots_per_device:g} robots is {_shown(hardware)} $/h",
            )
        )
    electricity = cost.energy_kwh_per_robot_hour * assumptions.electricity_usd_per_kwh
    if not close(cost.electricity_usd_per_robot_hour, electricity, EXACT):
        found.append(
            (
                "cost.electricity_usd_per_robot_hour",
                f"electricity cost = kWh x price: {cost.electricity_usd_per_robot_hour:g} $/h recorded, "
                f"{cost.energy_kwh_per_robot_hour:g} kWh x {assumptions.electricity_usd_per_kwh:g} $ is "
                f"{electricity:g} $/h",
            )
        )
    total = (recorded or 0.0) + cost.electricity_usd_per_robot_hour
    if not close(cost.usd_per_robot_hour, total, EXACT):
        found.append(
            (
                "cost.usd_per_robot_hour",
                f"cost per hour = hardware + electricity: {cost.usd_per_robot_hour:g} $/h recorded, {total:g} $/h",
            )
        )
    if cost.actions_per_robot_hour > 0:
        expected = cost.usd_per_robot_hour / cost.actions_per_robot_hour * 1e6
        if not close(cost.usd_per_million_actions, expected, EXACT):
            found.append(
                (
                    "cost.usd_per_million_actions",
                    f"cost per action = cost per hour / actions per hour: {cost.usd_per_million_actions:g} $ "
                    f"recorded, {cost.usd_per_robot_hour:g} $/h over {cost.actions_per_robot_hour:g} actions/h is "
                    f"{expected:g} $",
                )
            )
    return found


def _schema(result: RunResult) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in result.schema_version.split("."))
    except ValueError:
        return (0,)


def _shown(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"
