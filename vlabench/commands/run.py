"""``vlabench run`` without the UI: plan (validate everything before allocating), then execute."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import torch
from torch import Tensor

from vlabench.analysis.memory import Footprint, check_fits, check_fits_together, estimate_footprint
from vlabench.backends import BACKENDS, Backend, BackendOptions, backend_class
from vlabench.commands.run_checks import check_optimizations, check_workload, plan_caveats, with_checkpoint
from vlabench.commands.run_output import check_paths
from vlabench.commands.run_pass import timed_pass
from vlabench.commands.run_reference import ReferenceChoice, choose_reference, reference_builder
from vlabench.commands.run_serving import check_robots_fit, serve_in_process
from vlabench.config import RunConfig
from vlabench.errors import InputError, UnavailableError, unknown_name
from vlabench.hardware.detection import detect_host
from vlabench.hardware.devices import DeviceProfile, ResolvedDevice, resolve_device
from vlabench.hardware.targets import ENGINE_LABELS, mismatch, profile_engine
from vlabench.kernels.ceilings import measure_ceilings
from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.cold_start import timed_preparation
from vlabench.measure.correctness import compare, needs_reference, reference_actions
from vlabench.measure.dp_cache import DPCacheSchedule, parse_schedule
from vlabench.measure.policy import PreparedPolicy
from vlabench.measure.run_settings import iteration_cap
from vlabench.measure.timing import Contender, Pipelined, Progress, measure_energy, plain_inference
from vlabench.models.input_pipeline import InputPipeline, raw_observation
from vlabench.models.lerobot_folder import trained_checkpoint
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.optimizations.fidelity import action_error
from vlabench.results.assemble import Measured, assemble_result, energy_result, execution_model
from vlabench.results.schema import EnergyResult, Optimization, RunResult
from vlabench.results.sustained import sustained
from vlabench.telemetry.energy.select import MeterChoice, choose_meter
from vlabench.telemetry.system_state import sample_system_state
from vlabench.vocab import Precision

INPUT_VARIANTS = 2


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
    engine: str = "cpu"  # what the device profile stands for; the prepared policy must execute there
    options: BackendOptions = field(default_factory=BackendOptions)  # as routed to that engine
    reference: ReferenceChoice | None = None  # the correctness gate's reference; None: this run is the reference


def backend_options(config: RunConfig) -> BackendOptions:
    return BackendOptions(
        ep=config.ep,
        device_target=config.device_target,
        compile_mode=config.compile_mode,
        fuse_denoise_loop=config.fuse_denoise_loop,
        fuse_expert_kv=config.fuse_expert_kv,
        quant_scheme=config.quant_scheme,
    )


def check_quant_scheme(scheme: str | None, backend: type[Backend], precision: str | None) -> None:
    """``--quant-scheme`` only with int8 (or auto) on a backend with a choice, and one of that backend's schemes."""
    if scheme is None:
        return
    if precision not in ("int8", Precision.AUTO):
        raise InputError(
            f"--quant-scheme chooses how int8 is quantized; this run is {precision or 'at its default precision'} "
            "(use --precision int8 or auto)"
        )
    if not backend.int8_schemes:
        choosers = ", ".join(name for name, cls in BACKENDS.items() if cls.int8_schemes)
        raise InputError(f"backend '{backend.name}' has one int8 scheme; --quant-scheme applies to {choosers}")
    if scheme not in backend.int8_schemes:
        raise unknown_name(f"{backend.name} int8 scheme", scheme, backend.int8_schemes)


def plan_run(config: RunConfig) -> RunPlan:
    """Resolve every name and check the run can happen here; raises before anything large is allocated."""
    spec = load_model_spec(config.model)
    checkpoint = config.checkpoint or trained_checkpoint(spec)  # a model vlabench trained loads its weights
    if checkpoint is not None:
        spec = with_checkpoint(spec, checkpoint)
    workload = Workload.from_spec(
        spec, config.cameras, config.steps, config.chunk, config.actions_per_chunk, config.batch
    )
    schedule = parse_schedule(config.dp_cache, workload.steps) if config.dp_cache else None
    check_workload(spec, workload)
    check_quant_scheme(config.quant_scheme, backend_class(config.backend), config.precision)
    backend, options, device, engine = route_backend(config)
    check_optimizations(config, backend, schedule, spec)
    requested = Precision.parse(config.precision or default_precision(backend, device.torch_device), allow_auto=True)
    auto = requested == Precision.AUTO  # probed when executed (commands/precision_auto.py); planned at fp32
    precision = Precision.REFERENCE if auto else requested
    reason = backend.unavailable_reason(device.torch_device)
    if reason:
        raise UnavailableError(f"backend '{backend.name}' cannot run on {device.profile.display_name}: {reason}")
    if precision not in backend.precisions(device.torch_device):
        supported = ", ".join(backend.precisions(device.torch_device))
        raise UnavailableError(f"backend '{backend.name}' runs {supported} on {device.torch_device}, not {precision}")
    footprint = estimate_footprint(spec, workload, precision, backend.name, iteration_cap(config), config.preprocess)
    check_fits(spec, footprint, device.torch_device, precision)
    if config.robots:
        check_robots_fit(workload, config, footprint.total_bytes if device.torch_device.type == "cpu" else 0)
    reference = None
    if auto or needs_reference(backend.is_reference, precision):
        reference = choose_reference(spec, workload, device.torch_device, iteration_cap(config))
    meter = choose_meter(
        config.energy_meter, device.profile, detect_host(), config.energy_log, config.tdp_w, config.idle_w
    )
    caveats = plan_caveats(device, precision)
    return RunPlan(
        config,
        spec,
        device,
        backend,
        precision,
        workload,
        footprint,
        meter,
        caveats,
        schedule,
        engine,
        options,
        reference,
    )


def route_backend(config: RunConfig) -> tuple[Backend, BackendOptions, ResolvedDevice, str]:
    """The backend set up to execute on the engine the device profile stands for, its options, the device with the
    torch device that gets there, and that engine; refused before any work when the backend cannot reach it."""
    chosen, options = backend_class(config.backend), backend_options(config)
    device = resolve_device(config.device, reachable=lambda profile: reaches(chosen, options, profile, config))
    engine = profile_engine(device.profile, config.device_target)
    others = [f"--backend {n} ({cls.engines[engine]})" for n, cls in BACKENDS.items() if engine in cls.engines]
    ways = f"{device.profile.name} runs through {'; '.join(others) or 'no backend vlabench has'}"
    if engine not in chosen.engines:
        raise UnavailableError(
            f"{device.profile.name} executes on {ENGINE_LABELS[engine]}, which backend '{chosen.name}' cannot "
            f"reach; {ways}"
        )
    try:
        torch_device, options = chosen.route(engine, options)
    except UnavailableError as exc:
        raise UnavailableError(
            f"backend '{chosen.name}' cannot run on {device.profile.display_name}: {exc}; {ways}"
        ) from None
    return chosen.from_options(options), options, replace(device, torch_device=torch_device), engine


def reaches(backend: type[Backend], options: BackendOptions, profile: DeviceProfile, config: RunConfig) -> bool:
    """Whether ``backend`` can execute on the engine ``profile`` stands for, here (used by ``--device auto``)."""
    engine = profile_engine(profile, config.device_target)
    if engine not in backend.engines:
        return False
    try:
        backend.route(engine, options)
    except UnavailableError:
        return False
    return True


def prepare_checked(plan: RunPlan, backend: Backend | None = None) -> PreparedPolicy:
    """``backend`` (default: the plan's) prepared for the plan, its cold-start stages timed; the runtime must report
    executing where the profile says, so a mislabelled result is never written."""
    chosen = backend or plan.backend
    policy, preparation = timed_preparation(
        lambda: chosen.prepare(plan.spec, plan.workload, plan.device.torch_device, plan.precision, plan.config.seed)
    )
    policy.preparation = preparation
    problem = mismatch(plan.engine, policy.executed_on())
    if problem:
        raise UnavailableError(f"{plan.backend.name} on {plan.device.profile.name}: {problem}; refusing the run")
    return policy


def prepare_contender(plan: RunPlan, policy: PreparedPolicy | None = None, backend: Backend | None = None) -> Contender:
    """What every command times: the plan's policy (``policy``, or ``backend`` (default: the plan's) prepared and
    checked by ``prepare_checked``), its action loop with the plan's DP-Cache schedule, its seeded inputs and, when
    the input pipeline is timed, their raw forms."""
    target = plan.device.torch_device
    return Contender(
        policy or prepare_checked(plan, backend),
        make_action_loop(plan.spec, plan.workload, target, plan.schedule),
        seeded_inputs(plan, plan.precision),
        pipelined_inputs(plan) if plan.config.preprocess else (),
    )


def default_precision(backend: Backend, device: torch.device) -> str:
    """``Precision.default`` over what both the backend and (on CUDA) the GPU support."""
    on_cpu = device.type != "cuda"
    gpu = () if on_cpu else Precision.REDUCED if torch.cuda.is_bf16_supported() else ("fp16",)
    return Precision.default(on_cpu, set(gpu) & set(backend.precisions(device)))


def backend_names(requested: str) -> list[str]:
    """``all``, one name, or a comma-separated list (order kept, duplicates dropped)."""
    if requested == "all":
        return list(BACKENDS)
    return list(dict.fromkeys(name.strip() for name in requested.split(",") if name.strip()))


def plan_runs(config: RunConfig) -> tuple[list[RunPlan], list[str]]:
    """One plan per requested backend. With ``all``, backends unavailable here are skipped and reported. The output
    folder and the energy log are checked first."""
    check_paths(config)
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
    check_fits_together(first.spec, [plan.footprint for plan in plans], first.device.torch_device, first.precision)


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


def seeded_inputs(plan: RunPlan, precision: str) -> list[tuple]:
    """The same seeded observations and noise for every backend, at the given precision, on the target."""
    dtype = Precision.dtype(precision)
    target = plan.device.torch_device
    return [
        (
            synthetic_observation(plan.spec, plan.workload, plan.config.seed + i, dtype, target),
            initial_noise(plan.workload, plan.config.seed + i, dtype, target),
        )
        for i in range(INPUT_VARIANTS)
    ]


def pipelined_inputs(plan: RunPlan) -> list[Pipelined]:
    """Seeded raw observations (camera frames, an instruction, a state in robot units) and the model's input
    pipeline on the target, one per seeded input."""
    config, dtype = plan.config, Precision.dtype(plan.precision)
    pipeline = InputPipeline(plan.spec, plan.workload, config.seed, dtype, plan.device.torch_device)
    return [Pipelined(pipeline, raw_observation(plan.workload, config.seed + i)) for i in range(INPUT_VARIANTS)]


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
