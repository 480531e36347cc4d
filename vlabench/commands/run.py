"""``vlabench run`` without the UI: plan (validate everything before allocating), then execute."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import Tensor

from vlabench.analysis.cet import CostAssumptions, CostReport, cost_report
from vlabench.analysis.memory import Footprint, check_fits, estimate_footprint, peak_rss_bytes
from vlabench.analysis.roofline import analyze, ceilings_for
from vlabench.backends import BACKENDS, Backend, BackendOptions, get_backend
from vlabench.config import RunConfig
from vlabench.errors import InputError, UnavailableError
from vlabench.hardware.detection import cpu_has_native_bf16, detect_host
from vlabench.hardware.devices import ResolvedDevice, resolve_device
from vlabench.kernels.ceilings import measure_ceilings
from vlabench.measure.action_loops import make_sampler
from vlabench.measure.correctness import Correctness, compare, needs_reference, reference_actions
from vlabench.measure.dp_cache import DPCacheSchedule, parse_schedule
from vlabench.measure.stats import NOISY_COV, Stats, summarize
from vlabench.measure.timing import (
    Contender,
    EnergyWindows,
    Measurement,
    Progress,
    RunnerSettings,
    measure_energy,
    measure_interleaved,
    plain_inference,
)
from vlabench.models.checkpoints import checkpoint_stamp
from vlabench.models.replicas import replica_class
from vlabench.models.specs import ActSpec, DiffusionPolicySpec, FlowVLASpec, ModelSpec, OpenVLASpec, load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.optimizations.fidelity import action_error
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
from vlabench.telemetry.energy.base import EnergyMeter
from vlabench.telemetry.energy.select import MeterChoice, choose_meter
from vlabench.telemetry.system_state import SystemState, sample_system_state
from vlabench.vocab import Phase, Precision

INPUT_VARIANTS = 2
NOISE_CHECKED_PHASES = (*Phase.END_TO_END_PARTS, Phase.E2E)
BUSY_BACKGROUND_PERCENT = 25.0


@dataclass(frozen=True)
class RunPlan:
    config: RunConfig
    spec: ModelSpec
    device: ResolvedDevice
    backend: Backend
    precision: str
    workload: Workload
    footprint: Footprint
    meter: MeterChoice
    caveats: tuple[str, ...] = ()
    schedule: DPCacheSchedule | None = None


def backend_options(config: RunConfig) -> BackendOptions:
    return BackendOptions(
        ep=config.ep,
        device_target=config.device_target,
        compile_mode=config.compile_mode,
        fuse_denoise_loop=config.fuse_denoise_loop,
        fuse_expert_kv=config.fuse_expert_kv,
    )


def plan_run(config: RunConfig) -> RunPlan:
    """Resolve every name and check the run can happen here; raises before anything large is allocated."""
    spec = load_model_spec(config.model)
    if config.checkpoint is not None:
        spec = with_checkpoint(spec, config.checkpoint)
    workload = Workload.from_spec(spec, config.cameras, config.steps, config.chunk, config.actions_per_chunk)
    schedule = parse_schedule(config.dp_cache, workload.steps) if config.dp_cache else None
    check_workload(spec, workload)
    backend = get_backend(config.backend, backend_options(config))
    check_optimizations(config, backend, schedule, spec)
    device = resolve_device(config.device)
    precision = Precision.parse(config.precision or default_precision(backend, device.torch_device))
    reason = backend.unavailable_reason(device.torch_device)
    if reason:
        raise UnavailableError(f"backend '{backend.name}' cannot run on {device.profile.display_name}: {reason}")
    if precision not in backend.precisions(device.torch_device):
        supported = ", ".join(backend.precisions(device.torch_device))
        raise UnavailableError(f"backend '{backend.name}' runs {supported} on {device.torch_device}, not {precision}")
    footprint = estimate_footprint(spec, workload, precision)
    check_fits(spec, footprint, device.torch_device, precision)
    if needs_reference(backend.is_reference, precision):
        check_fits(
            spec, estimate_footprint(spec, workload, "fp32"), device.torch_device, "fp32 (correctness reference)"
        )
    meter = choose_meter(
        config.energy_meter, device.profile, detect_host(), config.energy_log, config.tdp_w, config.idle_w
    )
    caveats = plan_caveats(device, precision)
    return RunPlan(config, spec, device, backend, precision, workload, footprint, meter, caveats, schedule)


def with_checkpoint(spec: ModelSpec, path: Path) -> ModelSpec:
    """``spec`` loading the lerobot weights at ``path``; the file must exist and the family must have a mapping."""
    if not hasattr(replica_class(spec), "LEROBOT_RENAMES"):
        raise InputError(f"--checkpoint loads lerobot weights; {spec.name} has no lerobot layout")
    return spec.model_copy(update={"checkpoint": checkpoint_stamp(path)})


def check_workload(spec: ModelSpec, workload: Workload) -> None:
    """Knobs a family's action head fixes: one call for single-pass heads, one token per action value for OpenVLA."""
    if isinstance(spec, ActSpec | DiffusionPolicySpec) and workload.chunk != spec.action.chunk:
        raise InputError(f"{spec.name}'s head is built for a {spec.action.chunk}-action chunk: --chunk cannot change")
    if isinstance(spec, DiffusionPolicySpec) and workload.cameras != spec.cameras:
        raise InputError(
            f"{spec.name}'s U-Net condition is built for {spec.cameras} camera(s): --cameras cannot change"
        )
    if workload.sampler == "single_pass" and workload.steps != 1:
        raise InputError(f"{spec.name} predicts its chunk in one pass: --steps must be 1")
    if isinstance(spec, OpenVLASpec) and not spec.parallel:
        tokens = workload.chunk * workload.action_dim
        if workload.steps + 1 != tokens:
            raise InputError(f"{spec.name} decodes {tokens} action tokens: --steps (decode calls) must be {tokens - 1}")


def check_optimizations(config: RunConfig, backend: Backend, schedule: DPCacheSchedule | None, spec: ModelSpec) -> None:
    if config.fuse_expert_kv and not backend.fuses_expert_kv:
        fusing = ", ".join(name for name, cls in BACKENDS.items() if cls.fuses_expert_kv)
        raise InputError(f"--fuse-expert-kv applies to the {fusing} backend, not '{backend.name}'")
    if config.fuse_expert_kv and not isinstance(spec, FlowVLASpec):
        raise InputError(f"--fuse-expert-kv applies to the flow-matching VLAs (smolvla, pi0, pi05), not {spec.name}")
    if schedule is not None and spec.sampler not in ("euler", "ddpm", "ddim"):
        raise InputError(f"--dp-cache needs a denoising loop; {spec.name}'s action head runs {spec.sampler}")
    if schedule is not None and config.fuse_denoise_loop:
        raise InputError("--dp-cache and --fuse-denoise-loop cannot be combined: the captured loop runs every step")


def default_precision(backend: Backend, device: torch.device) -> str:
    """``Precision.default`` over what both the backend and (on CUDA) the GPU support."""
    on_cpu = device.type != "cuda"
    gpu = () if on_cpu else Precision.REDUCED if torch.cuda.is_bf16_supported() else ("fp16",)
    return Precision.default(on_cpu, set(gpu) & set(backend.precisions(device)))


def plan_caveats(device: ResolvedDevice, precision: str) -> tuple[str, ...]:
    """Known traps worth a warning before hours are spent."""
    if device.torch_device.type == "cpu" and precision == "bf16" and not cpu_has_native_bf16():
        return (
            "this CPU has no native bf16 (no avx512_bf16 or amx_bf16): bf16 matrix products are emulated and far "
            "slower than fp32 (compare with `vlabench devices --measure --precision fp32 --precision bf16`)",
        )
    return ()


def backend_names(requested: str) -> list[str]:
    """``all``, one name, or a comma-separated list (order kept, duplicates dropped)."""
    if requested == "all":
        return list(BACKENDS)
    return list(dict.fromkeys(name.strip() for name in requested.split(",") if name.strip()))


def plan_runs(config: RunConfig) -> tuple[list[RunPlan], list[str]]:
    """One plan per requested backend. With ``all``, backends unavailable here are skipped and reported."""
    names = backend_names(config.backend)
    plans, skipped = [], []
    for name in names:
        try:
            plans.append(plan_run(config.model_copy(update={"backend": name})))
        except (UnavailableError, InputError) as exc:
            if config.backend != "all":
                raise
            skipped.append(f"{name}: {exc}")
    if not plans:
        raise UnavailableError("no backend can run here: " + "; ".join(skipped))
    if len(plans) > 1:
        check_fit_together(plans)
    return plans, skipped


def check_fit_together(plans: list[RunPlan]) -> None:
    """Raises InsufficientMemoryError when the plans' replicas would not fit in memory at once."""
    first = plans[0]
    combined = first.footprint.model_copy(update={"total_bytes": sum(p.footprint.total_bytes for p in plans)})
    check_fits(first.spec, combined, first.device.torch_device, first.precision)


def execute(plan: RunPlan, progress: Progress | None = None) -> RunResult:
    return execute_many([plan], progress)[0]


def execute_many(plans: list[RunPlan], progress: Progress | None = None) -> list[RunResult]:
    """Prepare every plan's backend in this process, time them interleaved, then measure energy one by one."""
    first = plans[0]
    config, spec, workload = first.config, first.spec, first.workload
    started = datetime.now(timezone.utc)
    target = first.device.torch_device
    system_state = sample_system_state(target.type)
    if config.threads:
        torch.set_num_threads(config.threads)
    references = ReferenceCache(first, target)
    needs = [needs_reference(plan.backend.is_reference, plan.precision) for plan in plans]
    for plan, needed in zip(plans, needs, strict=True):
        if needed:
            references.get(plan.schedule)
    optimizations = [optimization_info(plan, references) for plan in plans]
    if target.type == "cuda":
        torch.cuda.reset_peak_memory_stats(target)
    ceilings = {
        plan.precision: measure_ceilings(target, (plan.precision,)) if config.measure_ceilings else [] for plan in plans
    }
    contenders = [
        Contender(
            plan.backend.prepare(spec, workload, target, plan.precision, config.seed),
            make_sampler(plan.spec, workload, target, plan.schedule),
            seeded_inputs(plan, plan.precision),
        )
        for plan in plans
    ]
    settings = RunnerSettings(config.warmup, config.min_iterations, config.min_duration_s, config.max_iterations)
    measurements = measure_interleaved(contenders, settings, progress)
    results = []
    for index, (plan, contender, measurement) in enumerate(zip(plans, contenders, measurements, strict=True)):
        correctness = None
        if needs[index]:
            obs, noise = contender.inputs[0]
            actions = plain_inference(contender.policy, contender.sampler, obs, noise)
            correctness = compare(actions, references.get(plan.schedule), noise, plan.precision)
        energy = measure_plan_energy(plan, contender)
        result = assemble_result(plan, contender, measurement, energy, correctness, system_state, started)
        result.optimization = optimizations[index]
        result.roofline = analyze(
            spec,
            workload,
            plan.precision,
            plan.device.profile.name,
            ceilings_for(plan.device.profile, plan.precision, ceilings[plan.precision]),
            {name: stats.p50 for name, stats in result.timing.phases.items()},
            computed_steps=len(plan.schedule.computed) if plan.schedule else None,
            hoisted=plan.config.fuse_expert_kv,
        )
        results.append(result)
    if len(plans) > 1:
        for result in results:
            result.warnings.append(
                f"{len(plans)} configurations ran in one process: peak memory covers all of them; timings are "
                "interleaved"
            )
    return results


class ReferenceCache:
    """fp32 eager torch action chunks on the first seeded input, one per DP-Cache schedule (None: exact)."""

    def __init__(self, plan: RunPlan, target: torch.device) -> None:
        self.plan, self.target = plan, target
        self._chunks: dict[tuple[int, ...] | None, Tensor] = {}

    def get(self, schedule: DPCacheSchedule | None) -> Tensor:
        key = schedule.computed if schedule else None
        if key not in self._chunks:
            plan = self.plan
            obs, noise = seeded_inputs(plan, "fp32")[0]
            self._chunks[key] = reference_actions(
                plan.spec, plan.workload, plan.config.seed, obs, noise, self.target, schedule
            )
        return self._chunks[key]


def optimization_info(plan: RunPlan, references: ReferenceCache) -> Optimization | None:
    """What the run changed on the action expert, and (for DP-Cache, which is lossy) its open-loop action error
    against the exact path: fp32 eager torch, same weights, observation and noise."""
    config, schedule = plan.config, plan.schedule
    if schedule is None and not config.fuse_expert_kv:
        return None
    error = None
    if schedule is not None:
        noise = seeded_inputs(plan, "fp32")[0][1]
        error = action_error(references.get(schedule), references.get(None), noise)
    return Optimization(dp_cache=schedule, fuse_expert_kv=config.fuse_expert_kv, dp_cache_error=error)


def seeded_inputs(plan: RunPlan, precision: str) -> list[tuple]:
    """The same seeded observations and noise for every backend, at the given precision, on the target."""
    dtype = Precision.DTYPES[precision]
    target = plan.device.torch_device
    return [
        (
            synthetic_observation(plan.spec, plan.workload, plan.config.seed + i, dtype, target),
            initial_noise(plan.workload, plan.config.seed + i, dtype, target),
        )
        for i in range(INPUT_VARIANTS)
    ]


def measure_plan_energy(plan: RunPlan, contender: Contender) -> EnergyResult | None:
    meter, config = plan.meter.meter, plan.config
    if meter is None:
        return None
    try:
        windows = measure_energy(
            contender.policy, contender.sampler, contender.inputs, meter, config.energy_window_s, config.idle_window_s
        )
    finally:
        meter.close()
    return energy_result(meter, windows, plan.workload.actions_per_chunk, plan.meter.notes)


def assemble_result(
    plan: RunPlan,
    contender: Contender,
    measurement: Measurement,
    energy: EnergyResult | None,
    correctness: Correctness | None,
    system_state: SystemState,
    started: datetime,
) -> RunResult:
    config, spec, workload = plan.config, plan.spec, plan.workload
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
    control = control_verdict(timing.phases["e2e"], workload.actions_per_chunk, config.control_hz)
    price = config.price_usd or (plan.device.profile.price.usd if plan.device.profile.price else None)
    memory_gb = plan.device.profile.memory_gb.value if plan.device.profile.memory_gb else None
    if memory_gb is None and target.type == "cpu":
        memory_gb = round(host.memory_gb, 1)
    return RunResult(
        run_id=uuid.uuid4().hex,
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
            price_usd=price,
        ),
        backend=plan.backend.name,
        backend_details=contender.policy.details(),
        precision=plan.precision,
        timing=timing,
        control=control,
        correctness=correctness,
        energy=energy,
        cost=run_cost(plan, energy, timing.phases["e2e"], price) if energy else None,
        memory=MemoryInfo(
            params=plan.footprint.params,
            weights_bytes=plan.footprint.weights_bytes,
            estimated_total_bytes=plan.footprint.total_bytes,
            peak_rss_bytes=peak_rss_bytes(),
            cuda_max_allocated_bytes=torch.cuda.max_memory_allocated(target) if target.type == "cuda" else None,
        ),
        warnings=[*plan.caveats, *measurement_warnings(phases, config, measurement, system_state, correctness)],
        system_state=system_state,
        provenance=collect_provenance(host, torch.get_num_threads()),
    )


def energy_result(meter: EnergyMeter, windows: EnergyWindows, actions_per_chunk: int, notes: list[str]) -> EnergyResult:
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
        joules_per_action=per_inference / actions_per_chunk,
        dynamic_joules_per_inference=(busy.average_w - idle.average_w) * busy.duration_s / windows.iterations,
        notes=notes,
    )


def run_cost(plan: RunPlan, energy: EnergyResult, e2e: Stats, price: float | None) -> CostReport:
    profile_price = plan.device.profile.price
    config = plan.config
    return cost_report(
        price_usd=price,
        price_source="--price-usd" if config.price_usd else profile_price.source if profile_price else None,
        price_estimate=bool(profile_price and profile_price.estimate and not config.price_usd),
        joules_per_inference=energy.joules_per_inference,
        idle_w=energy.idle_w,
        energy_label=energy.label,
        latency_p50_ms=e2e.p50,
        actions_per_chunk=plan.workload.actions_per_chunk,
        control_hz=config.control_hz,
        assumptions=CostAssumptions(
            lifetime_years=config.lifetime_years,
            duty_cycle=config.duty_cycle,
            electricity_usd_per_kwh=config.usd_per_kwh,
        ),
    )


def control_verdict(e2e: Stats, actions_per_chunk: int, control_hz: float) -> ControlVerdict:
    """Action rate = actions executed per chunk / inference latency; the target must hold at p99."""
    action_hz_p99 = actions_per_chunk * 1000.0 / e2e.p99
    return ControlVerdict(
        control_hz=control_hz,
        actions_per_chunk=actions_per_chunk,
        inference_hz_p50=1000.0 / e2e.p50,
        inference_hz_p99=1000.0 / e2e.p99,
        action_hz_p50=actions_per_chunk * 1000.0 / e2e.p50,
        action_hz_p99=action_hz_p99,
        meets_target=action_hz_p99 >= control_hz,
    )


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
            "tolerance against torch fp32; this run is never ranked"
        )
    if system.background_cpu_percent > BUSY_BACKGROUND_PERCENT:
        warnings.append(
            f"other processes kept the CPUs {system.background_cpu_percent:.0f}% busy before the run started; "
            "close them for reproducible timings"
        )
    if measurement.iterations >= config.max_iterations and measurement.timed_duration_s < config.min_duration_s:
        warnings.append(
            f"stopped at --max-iterations {config.max_iterations} after {measurement.timed_duration_s:.1f} s, "
            f"before the {config.min_duration_s:g} s minimum duration"
        )
    return warnings


def config_hash(plan: RunPlan) -> str:
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
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
