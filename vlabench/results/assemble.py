"""A run's JSON result, assembled from its plan and what was measured: timing statistics, the control-rate
verdict, energy, cost, memory, warnings and provenance."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import torch

from vlabench.analysis.cet import CostAssumptions, CostReport, ExecutionModel, cost_report, gate
from vlabench.analysis.memory import Footprint, peak_rss_bytes
from vlabench.analysis.roofline import analyze, ceilings_for
from vlabench.backends import Backend
from vlabench.config import RunConfig
from vlabench.hardware.detection import detect_host
from vlabench.hardware.devices import ResolvedDevice
from vlabench.kernels.ceilings import MeasuredCeiling
from vlabench.measure.correctness import Correctness
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.run_settings import runner_settings
from vlabench.measure.stats import NOISY_COV, Stats, summarize
from vlabench.measure.timing import Contender, EnergyWindows, Measurement
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload
from vlabench.results.provenance import collect_provenance
from vlabench.results.schema import (
    ControlVerdict,
    DeviceInfo,
    EnergyResult,
    MemoryInfo,
    ModelInfo,
    Optimization,
    RunResult,
    Timing,
)
from vlabench.results.serving import ServingResult, serving_warnings
from vlabench.results.serving_energy import Pricing, served_cost
from vlabench.results.sustained import DRIFT_WARNING, Sustained, cold_start, full_windows
from vlabench.telemetry.energy.base import EnergyMeter
from vlabench.telemetry.system_state import SystemState
from vlabench.vocab import Phase

NOISE_CHECKED_PHASES = (*Phase.END_TO_END_PARTS, Phase.E2E)
BUSY_BACKGROUND_PERCENT = 25.0


class PlannedRun(Protocol):
    """What a result is about: the plan ``commands.run.plan_run`` resolved (its ``RunPlan`` has these fields)."""

    config: RunConfig
    spec: ModelSpec
    device: ResolvedDevice
    backend: Backend
    precision: str
    workload: Workload
    footprint: Footprint
    caveats: tuple[str, ...]
    schedule: DPCacheSchedule | None
    engine: str


@dataclass(frozen=True)
class Measured:
    """Everything measured for one plan, the input of its result."""

    contender: Contender
    measurement: Measurement
    energy: EnergyResult | None = None
    correctness: Correctness | None = None
    sustained: Sustained | None = None
    ceilings: list[MeasuredCeiling] = field(default_factory=list)  # measured before timing (``--measure-ceilings``)
    optimization: Optimization | None = None
    notes: tuple[str, ...] = ()  # warnings about how it ran (several configurations in one process, a re-run alone)
    details: dict[str, Any] = field(default_factory=dict)  # backend details decided before it ran (precision auto)
    serving: ServingResult | None = None  # --robots: the robots served after the timed pass
    stopped: str | None = None  # why serving stopped before any request was served (the result is partial)


def assemble_result(plan: PlannedRun, measured: Measured, system_state: SystemState, started: datetime) -> RunResult:
    """The whole result of one plan, frozen: nothing is added to it afterwards."""
    config, spec, workload = plan.config, plan.spec, plan.workload
    contender, measurement, energy = measured.contender, measured.measurement, measured.energy
    correctness, sustained = measured.correctness, measured.sustained
    serving = measured.serving
    target = plan.device.torch_device
    samples = measurement.samples_ms
    steps = [samples[Phase.step_span(i)] for i in range(workload.steps) if Phase.step_span(i) in samples]
    if steps:
        samples["denoise_step"] = [value for step in steps for value in step]
    phases = {name: summarize(samples[name]) for name in Phase.RECORDED if name in samples}
    timing = Timing(
        phases=phases,
        denoise_steps=[summarize(step) for step in steps],
        first_inference_ms=measurement.first_inference_ms,
        warmup_iterations=max(config.warmup, 1),
        iterations=measurement.iterations,
        timed_duration_s=measurement.timed_duration_s,
        samples_ms=samples,
    )
    host = detect_host()
    # a served run is gated on the latency its robots saw, queueing included
    judged = serving.latency if serving else timing.phases["e2e"]
    control = control_verdict(judged, config.control_hz, execution_model(config, workload))
    price = device_price(plan)
    memory_gb = plan.device.profile.memory_gb.value if plan.device.profile.memory_gb else None
    usable_gb = plan.device.profile.usable_gb
    if memory_gb is None and target.type == "cpu":
        memory_gb = usable_gb = round(host.memory_gb, 1)
    stopped = measured.stopped or (serving.stopped if serving and serving.status == "partial" else None)
    return RunResult(
        run_id=uuid.uuid4().hex,
        status="partial" if stopped else "complete",
        partial_reason=stopped,
        config_hash=config_hash(plan),
        started_utc=started,
        finished_utc=datetime.now(timezone.utc),
        config=config.model_copy(update={"backend": plan.backend.name}),
        workload=workload,
        model=ModelInfo(
            name=spec.name,
            family=spec.family,
            spec_hash=spec.spec_hash,
            params=plan.footprint.params,
            tokens_per_camera=spec.tokens_per_camera,
            checkpoint=spec.checkpoint,
        ),
        device=DeviceInfo(
            requested=plan.device.requested,
            profile=plan.device.profile.name,
            display_name=plan.device.profile.display_name,
            kind=plan.device.profile.kind,
            torch_device=str(target),
            note=plan.device.note,
            memory_gb=memory_gb,
            usable_memory_gb=usable_gb,
            price_usd=price,
            engine=plan.engine,
        ),
        execution=contender.policy.executed_on(),
        backend=plan.backend.name,
        backend_details={**contender.policy.details(), **measured.details},
        precision=plan.precision,
        timing=timing,
        control=control,
        correctness=correctness,
        energy=energy,
        cost=run_cost(plan, energy, judged, price, serving) if energy else None,
        memory=MemoryInfo(
            params=plan.footprint.params,
            weights_bytes=plan.footprint.weights_bytes,
            estimated_total_bytes=plan.footprint.total_bytes,
            peak_rss_bytes=peak_rss_bytes(),
            cuda_max_allocated_bytes=torch.cuda.max_memory_allocated(target) if target.type == "cuda" else None,
        ),
        warnings=[
            *plan.caveats,
            *measurement_warnings(phases, config, measurement, system_state, correctness),
            *sustained_warnings(sustained),
            *serving_warnings(serving),
            *([f"partial: {measured.stopped}"] if measured.stopped else []),
            *measured.notes,
        ],
        system_state=system_state,
        cold_start=cold_start(
            contender.policy.preparation, timing.first_inference_ms, config.idle_probe_s, measurement.after_idle_ms
        ),
        sustained=sustained,
        serving=serving,
        optimization=measured.optimization,
        roofline=analyze(
            spec,
            workload,
            plan.precision,
            plan.device.profile.name,
            ceilings_for(plan.device.profile, plan.precision, measured.ceilings),
            {name: stats.p50 for name, stats in phases.items()},
            computed_steps=len(plan.schedule.computed) if plan.schedule else None,
            hoisted=config.fuse_expert_kv,
        ),
        provenance=collect_provenance(host, torch.get_num_threads()),
    )


def energy_result(
    meter: EnergyMeter, windows: EnergyWindows, actions_per_inference: int, notes: list[str]
) -> EnergyResult:
    """Energy of the window; per action: per inference / the actions each inference executes (``execution_model``,
    times its batch's rows)."""
    busy, idle = windows.busy, windows.idle
    per_inference = busy.joules / windows.iterations
    return EnergyResult(
        label=meter.label,
        method=meter.method,
        scope=meter.scope,
        sampling_period_s=meter.sampling_period_s,
        meter=meter.describe(),
        idle_window_s=idle.duration_s,
        idle_w=idle.average_w,
        window_s=busy.duration_s,
        window_inferences=windows.iterations,
        average_w=busy.average_w,
        joules_per_inference=per_inference,
        joules_per_action=per_inference / actions_per_inference,
        dynamic_joules_per_inference=(busy.average_w - idle.average_w) * busy.duration_s / windows.iterations,
        notes=notes,
    )


def device_price(plan: PlannedRun) -> float | None:
    """The purchase price a run is costed at: ``--price-usd``, else the device profile's."""
    return plan.config.price_usd or (plan.device.profile.price.usd if plan.device.profile.price else None)


def run_cost(
    plan: PlannedRun, energy: EnergyResult, e2e: Stats, price: float | None, serving: ServingResult | None = None
) -> CostReport | None:
    """Per robot-hour at the latency ``e2e``, shared by a batch run's batch; a served run's from what its window
    served (``serving_energy.served_cost``: None when the window has no energy)."""
    profile_price = plan.device.profile.price
    config = plan.config
    source = "--price-usd" if config.price_usd else profile_price.source if profile_price else None
    estimate = bool(profile_price and profile_price.estimate and not config.price_usd)
    assumptions = CostAssumptions(
        lifetime_years=config.lifetime_years, duty_cycle=config.duty_cycle, electricity_usd_per_kwh=config.usd_per_kwh
    )
    execution = execution_model(config, plan.workload)
    if serving is not None:
        return served_cost(serving, Pricing(price, source, estimate, assumptions), config.control_hz, execution)
    return cost_report(
        price_usd=price,
        price_source=source,
        price_estimate=estimate,
        joules_per_inference=energy.joules_per_inference,
        idle_w=energy.idle_w,
        energy_label=energy.label,
        latency_p50_ms=e2e.p50,
        control_hz=config.control_hz,
        execution=execution,
        robots_per_device=plan.workload.batch,
        rows_per_inference=plan.workload.batch,
        assumptions=assumptions,
    )


def execution_model(config: RunConfig, workload: Workload) -> ExecutionModel:
    """The run's execution model: per step (the default), or chunked (``--execution sync|async``) at the workload's
    actions per chunk (``--actions-per-chunk``, else the model's own)."""
    if config.execution == "per-step":
        return ExecutionModel()
    return ExecutionModel(mode=config.execution, actions_per_chunk=workload.actions_per_chunk)


def control_verdict(e2e: Stats, control_hz: float, execution: ExecutionModel) -> ControlVerdict:
    """The control-rate gate (``cet.gate``) on the end-to-end latency, judged on the upper end of p99's confidence
    interval (the slowest sample when the samples are too few to bound p99: the verdict says so)."""
    judged, judged_on = e2e.judged_p99()
    return ControlVerdict.from_gate(gate(e2e.p50, judged, control_hz, execution), judged_on)


def measurement_warnings(
    phases: dict[str, Stats],
    config: RunConfig,
    measurement: Measurement,
    system: SystemState,
    correctness: Correctness | None = None,
) -> list[str]:
    warnings = [
        f"{name}: coefficient of variation {phases[name].cov:.1%} exceeds {NOISY_COV:.0%}; the timing is noisy "
        "(other load, frequency scaling or thermal throttling)"
        for name in NOISE_CHECKED_PHASES
        if phases[name].cov > NOISY_COV
    ]
    if correctness is not None and not correctness.passed:
        warnings.append(
            f"INVALID: action error {correctness.relative_error:.2e} (relative) / cosine "
            f"{correctness.displacement_cosine:.6f} "
            f"exceeds the {correctness.tolerance.max_relative_error:g} / {correctness.tolerance.min_cosine:g} "
            f"tolerance against torch {correctness.reference_precision}; this run is never ranked"
        )
    if system.background_cpu_percent > BUSY_BACKGROUND_PERCENT:
        warnings.append(
            f"other processes kept the CPUs {system.background_cpu_percent:.0f}% busy before the run started; "
            "close them for reproducible timings"
        )
    if config.duration_s is not None:
        if measurement.timed_duration_s < config.duration_s:
            warnings.append(
                f"stopped at the sustained run's cap of {measurement.iterations} inferences after "
                f"{measurement.timed_duration_s:.1f} s, before its {config.duration_s:g} s duration"
            )
        return warnings
    if measurement.iterations >= config.max_iterations and measurement.timed_duration_s < config.min_duration_s:
        warnings.append(
            f"stopped at --max-iterations {config.max_iterations} after {measurement.timed_duration_s:.1f} s, "
            f"before the {config.min_duration_s:g} s minimum duration"
        )
    settings = runner_settings(config)
    wanted, cap_s = settings.min_iterations, settings.max_duration_s
    if measurement.iterations < wanted and measurement.timed_duration_s >= cap_s:
        warnings.append(
            f"stopped at {cap_s:g} s of timed work (--max-duration, at least --min-duration) after "
            f"{measurement.iterations} of the "
            f"{wanted} inferences asked for"
            + (" (the count a bound on p99 needs)" if config.min_iterations is None else "")
        )
    return warnings


def sustained_warnings(sustained: Sustained | None) -> list[str]:
    """Latency that drifted from the first window to the last, and what the sensors say throttled."""
    if sustained is None:
        return []
    warnings = [f"throttling during the timed pass: {change}" for change in sustained.throttling]
    drift = sustained.p50_drift
    if drift is not None and abs(drift) > DRIFT_WARNING:
        windows = full_windows(sustained.windows)
        warnings.append(
            f"end-to-end p50 drifted {drift:+.1%} from the first {sustained.window_s:g} s window "
            f"({windows[0].p50:.2f} ms) to the last ({windows[-1].p50:.2f} ms)"
        )
    return warnings


def config_hash(plan: PlannedRun) -> str:
    """Identity of what was measured: model spec, workload, device profile, backend, precision, seed."""
    identity = {
        "spec": plan.spec.spec_hash,
        "workload": plan.workload.model_dump(),
        "device": plan.device.profile.name,
        "backend": plan.backend.name,
        "precision": plan.precision,
        "seed": plan.config.seed,
        "threads": plan.config.threads,
        "dp_cache": plan.schedule.computed if plan.schedule else None,
        "fuse_expert_kv": plan.config.fuse_expert_kv,
        "preprocess": plan.config.preprocess,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
