"""``vlabench run``'s execution in this process: the correctness reference first, every plan prepared and timed
interleaved, then its energy and its robots one plan at a time, each result assembled whole."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import torch
from torch import Tensor

from vlabench.commands.run.plan import RunPlan
from vlabench.commands.run.prepare import prepare_contender, seeded_inputs
from vlabench.commands.run.reference import ReferenceChoice, reference_builder
from vlabench.commands.run.serving import serve_in_process
from vlabench.commands.run.timed_pass import timed_pass
from vlabench.kernels.ceilings import measure_ceilings
from vlabench.measure.correctness import compare, needs_reference, reference_actions
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.policy import PreparedPolicy
from vlabench.measure.timing import Contender, Progress, measure_energy, plain_inference
from vlabench.optimizations.fidelity import action_error
from vlabench.results.assemble import Measured, assemble_result, energy_result, execution_model
from vlabench.results.schema import EnergyResult, Optimization, RunResult
from vlabench.results.sustained import sustained
from vlabench.telemetry.system_state import sample_system_state


def execute(plan: RunPlan, progress: Progress | None = None) -> RunResult:
    return execute_many([plan], progress)[0]


def execute_many(
    plans: list[RunPlan],
    progress: Progress | None = None,
    prepared: dict[int, PreparedPolicy] | None = None,
    notes: tuple[str, ...] = (),
    extra_details: dict[int, dict[str, Any]] | None = None,
    announce: Callable[[str], None] | None = None,
) -> list[RunResult]:
    """Prepare every plan's backend in this process (``prepared``: plan index → a policy already prepared for it),
    time them interleaved, then measure energy one by one; each result is assembled whole, with ``notes`` among its
    warnings and ``extra_details`` (plan index → entries) in its backend details."""
    first = plans[0]
    config, spec = first.config, first.spec
    started = datetime.now(timezone.utc)
    target = first.device.torch_device
    system_state = sample_system_state(target.type)
    if config.threads:
        torch.set_num_threads(config.threads)
    references = ReferenceCache(next((plan for plan in plans if plan.reference), first), target)
    needs = [needs_reference(plan.backend.is_reference, plan.precision) for plan in plans]
    for plan, needed in zip(plans, needs, strict=True):
        if needed:
            references.get(plan.schedule)
    optimizations = [optimization_info(plan, references) for plan in plans]
    if target.type == "cuda":
        torch.cuda.reset_peak_memory_stats(target)
    # One measurement for every plan of the process (each precision's GEMM peak once, one bandwidth), so plans timed
    # side by side rest on the same bandwidth reading.
    precisions = tuple(dict.fromkeys(plan.precision for plan in plans))
    ceilings = measure_ceilings(target, precisions) if config.measure_ceilings else []
    contenders = [prepare_contender(plan, (prepared or {}).get(index)) for index, plan in enumerate(plans)]
    measurements, series, began = timed_pass(contenders, config, target, progress)
    shared = (
        (f"{len(plans)} configurations ran in one process: peak memory covers all of them; timings are interleaved",)
        if len(plans) > 1
        else ()
    )
    results = []
    for index, (plan, contender, measurement) in enumerate(zip(plans, contenders, measurements, strict=True)):
        correctness = None
        if needs[index]:
            obs, noise = contender.inputs[0]
            actions = plain_inference(contender.policy, contender.loop, obs, noise)
            choice = references.choice
            correctness = compare(
                actions, references.get(plan.schedule), noise, plan.precision, choice.precision, spec, choice.reason
            )
        energy = measure_plan_energy(plan, contender)
        serving, stopped = serve_in_process(plan, contender, prepare_contender, plan.meter.meter, energy, announce)
        measured = Measured(
            contender=contender,
            measurement=measurement,
            energy=energy,
            correctness=correctness,
            sustained=sustained(
                measurement.iteration_starts_ns,
                measurement.samples_ms["e2e"],
                began,
                config.window_s,
                series,
                config.sensor_period_s,
            ),
            ceilings=ceilings,
            optimization=optimizations[index],
            notes=(*shared, *notes),
            details=(extra_details or {}).get(index, {}),
            serving=serving,
            stopped=stopped,
        )
        results.append(assemble_result(plan, measured, system_state, started))
    return results


class ReferenceCache:
    """Eager torch action chunks at the plan's reference precision (fp32 unless it did not fit) on the first seeded
    input, one per DP-Cache schedule (None: exact)."""

    def __init__(self, plan: RunPlan, target: torch.device) -> None:
        self.plan, self.target = plan, target
        self.choice = plan.reference or ReferenceChoice()
        self._chunks: dict[tuple[int, ...] | None, Tensor] = {}

    def get(self, schedule: DPCacheSchedule | None) -> Tensor:
        key = schedule.computed if schedule else None
        if key not in self._chunks:
            plan, precision = self.plan, self.choice.precision
            obs, noise = seeded_inputs(plan, precision)[0]
            build = reference_builder(plan.spec, plan.config.seed, precision, self.target)
            self._chunks[key] = reference_actions(
                plan.spec, plan.workload, plan.config.seed, obs, noise, self.target, schedule, precision, build
            )
        return self._chunks[key]


def optimization_info(plan: RunPlan, references: ReferenceCache) -> Optimization | None:
    """What the run changed on the action expert, and (for DP-Cache, which is lossy) its open-loop action error
    against the exact path: eager torch at the reference precision, same weights, observation and noise."""
    config, schedule = plan.config, plan.schedule
    if schedule is None and not config.fuse_expert_kv:
        return None
    error = None
    if schedule is not None:
        noise = seeded_inputs(plan, references.choice.precision)[0][1]
        error = action_error(references.get(schedule), references.get(None), noise)
    return Optimization(dp_cache=schedule, fuse_expert_kv=config.fuse_expert_kv, dp_cache_error=error)


def measure_plan_energy(plan: RunPlan, contender: Contender) -> EnergyResult | None:
    meter, config = plan.meter.meter, plan.config
    if meter is None:
        return None
    try:
        windows = measure_energy(contender, meter, config.energy_window_s, config.idle_window_s)
    finally:
        meter.close()
    actions = execution_model(plan.config, plan.workload).actions_per_inference * plan.workload.batch
    return energy_result(meter, windows, actions, plan.meter.notes)
