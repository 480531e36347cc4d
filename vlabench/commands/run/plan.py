"""``vlabench run``'s plan: every name resolved and every check made before anything large is allocated."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

from vlabench.analysis.memory import Footprint, check_fits, check_fits_together, estimate_footprint
from vlabench.backends import BACKENDS, Backend, BackendOptions, backend_class
from vlabench.commands.run.checks import (
    check_optimizations,
    check_robots_fit,
    check_workload,
    plan_caveats,
    with_checkpoint,
)
from vlabench.commands.run.output import check_paths
from vlabench.commands.run.reference import ReferenceChoice, choose_reference
from vlabench.config import RunConfig
from vlabench.errors import InputError, UnavailableError, unknown_name
from vlabench.hardware.detection import detect_host
from vlabench.hardware.devices import ResolvedDevice
from vlabench.hardware.targets import ENGINE_LABELS, profile_engine, resolve_target
from vlabench.measure.correctness import needs_reference
from vlabench.measure.dp_cache import DPCacheSchedule, parse_schedule
from vlabench.measure.run_settings import iteration_cap
from vlabench.models.lerobot_folder import trained_checkpoint
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.models.workload import Workload
from vlabench.telemetry.energy.select import MeterChoice, choose_meter
from vlabench.vocab import Precision


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

    def at(self, precision: str | None = None, batch: int | None = None) -> RunPlan:
        """This plan re-planned at another ``precision`` (one its backend declares; ``auto`` is planned at fp32, the
        largest footprint) and/or ``batch``: its config, workload, footprint and caveats follow."""
        update: dict[str, object] = {}
        workload = self.workload
        if precision is not None:
            update["precision"] = precision
        if batch is not None:
            update["batch"] = batch
            workload = workload.model_copy(update={"batch": batch})
        precision = precision or self.precision
        config = self.config.model_copy(update=update)
        footprint = estimate_footprint(
            self.spec, workload, precision, self.backend.name, iteration_cap(config), config.preprocess
        )
        caveats = plan_caveats(self.device, precision)
        return replace(
            self, config=config, workload=workload, precision=precision, footprint=footprint, caveats=caveats
        )


def backend_options(config: RunConfig) -> BackendOptions:
    """The run's backend flags: the config's fields that ``BackendOptions`` names (each backend validates its own)."""
    return BackendOptions(
        **{
            flag.name: getattr(config, flag.name)
            for flag in fields(BackendOptions)
            if flag.name in RunConfig.model_fields
        }
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
    auto = requested == Precision.AUTO  # probed when executed (commands/run/precision_auto.py); planned at fp32
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
    device = resolve_target(config.device, reachable_engines(chosen, options), config.device_target)
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


def reachable_engines(backend: type[Backend], options: BackendOptions) -> frozenset[str]:
    """The engines ``backend`` can execute on here under ``options`` (what ``--device auto`` chooses among)."""
    reached = set()
    for engine in backend.engines:
        try:
            backend.route(engine, options)
        except UnavailableError:
            continue
        reached.add(engine)
    return frozenset(reached)


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
