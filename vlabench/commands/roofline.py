"""``vlabench roofline``: analytic counts against datasheet and measured ceilings, achieved rates from a measured
result, and a projection (with a feasibility verdict) to any profiled device, present or not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from vlabench.analysis.cet import ExecutionModel, Gate, gate
from vlabench.analysis.memory import estimate_footprint
from vlabench.analysis.roofline import (
    RooflineReport,
    analyze,
    apply_projection,
    ceilings_for,
    efficiency_from,
    project,
)
from vlabench.errors import InputError
from vlabench.hardware.detection import detect_host
from vlabench.hardware.devices import (
    FAMILY_ALIASES,
    DeviceProfile,
    load_device_profile,
    profile_present,
    resolve_device,
)
from vlabench.kernels.ceilings import DTYPES as CEILING_DTYPES
from vlabench.kernels.ceilings import MeasuredCeiling, measure_ceilings
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.results.schema import RunResult, load_result
from vlabench.vocab import Precision

MEASURED_PRECISIONS = ("fp32", "bf16", "fp16")  # what the torch backend runs; each gets its own GEMM peak


@dataclass(frozen=True)
class RooflineRequest:
    model: str
    device: str = "auto"
    precision: str = "bf16"
    cameras: int | None = None
    steps: int | None = None
    chunk: int | None = None
    measure_ceilings: bool | None = None  # None: measure when the device is this host
    result: Path | None = None  # measured phase latencies for achieved FLOP/s
    efficiency: float | None = None
    calibrate: Path | None = None  # a result whose measured share of the roofline calibrates the projection
    control_hz: float = 10.0
    stack: str = "pytorch-eager"  # the fitted stack the default projection uses


class Feasibility(BaseModel):
    """The projected latency through ``analysis.cet.gate`` (per-step by default) and the memory check."""

    label: str
    e2e_ms: float
    action_hz: float = Field(description="actions the robot executes per second (the gate's delivered rate)")
    control_hz: float
    meets_control_rate: bool
    gate: Gate
    footprint_gb: float
    memory_gb: float | None
    fits_memory: bool | None


class RooflineOutcome(BaseModel):
    report: RooflineReport
    present: bool
    measured_ceilings: list[MeasuredCeiling]
    feasibility: Feasibility | None


def default_precision(profile: DeviceProfile) -> str:
    """``Precision.default`` over the precisions the profile quotes a peak for."""
    return Precision.default(profile.torch_device == "cpu", profile.peak_tflops)


def resolve_profile(requested: str) -> tuple[DeviceProfile, torch.device | None]:
    """The device profile, and the torch device when that hardware is on this host (None: projection only)."""
    if requested in FAMILY_ALIASES:
        resolved = resolve_device(requested)
        return resolved.profile, resolved.torch_device
    profile = load_device_profile(requested)
    if not profile_present(profile, detect_host()):
        return profile, None
    return profile, resolve_device(requested).torch_device


def run_roofline(request: RooflineRequest) -> RooflineOutcome:
    spec = load_model_spec(request.model)
    profile, torch_device = resolve_profile(request.device)
    workload = Workload.from_spec(spec, request.cameras, request.steps, request.chunk)
    measure = request.measure_ceilings if request.measure_ceilings is not None else torch_device is not None
    if measure and torch_device is None:
        raise InputError(f"--measure-ceilings needs the hardware: {profile.display_name} is not on this host")
    precisions = tuple(dict.fromkeys((request.precision, *MEASURED_PRECISIONS)))
    measured = measure_ceilings(torch_device, precisions) if measure and torch_device is not None else []
    measured_ms = _measured_phases(request.result, spec.name, workload, request.precision) if request.result else None
    report = analyze(
        spec, workload, request.precision, profile.name, ceilings_for(profile, request.precision, measured), measured_ms
    )
    if report.primary is None:
        measurable = request.precision in CEILING_DTYPES
        raise InputError(
            f"{profile.name} has no {request.precision} peak and bandwidth in its profile"
            + (" and none were measured" if measure else "")
            + ": nothing to draw a roofline against"
            + (" (drop --no-measure-ceilings)" if torch_device is not None and not measure and measurable else "")
        )
    feasibility = None
    if request.efficiency is not None or request.calibrate is not None:
        efficiency, source = _efficiency(request)
        project(report, efficiency, source)
        feasibility = _feasibility(report, spec, workload, request.precision, profile, request.control_hz)
    elif torch_device is None:
        _model_projection(report, spec, workload, request.precision, profile, request.stack)
        feasibility = _feasibility(report, spec, workload, request.precision, profile, request.control_hz)
    return RooflineOutcome(
        report=report, present=torch_device is not None, measured_ceilings=measured, feasibility=feasibility
    )


def _efficiency(request: RooflineRequest) -> tuple[dict[str, float], str]:
    if request.efficiency is not None and request.calibrate is not None:
        raise InputError("give --efficiency or --calibrate, not both")
    if request.calibrate is not None:
        result = load_result(request.calibrate)
        if result.roofline is None:
            raise InputError(f"{request.calibrate}: the result has no roofline block (written by an older vlabench)")
        efficiency = efficiency_from(result.roofline)
        return efficiency, (
            f"measured share of the roofline of {result.model.name} on {result.device.profile} "
            f"({result.backend}, {result.precision}) in {request.calibrate.name}"
        )
    return {"e2e": request.efficiency or 1.0}, f"--efficiency {request.efficiency:g}"


def _model_projection(
    report: RooflineReport, spec, workload: Workload, precision: str, profile: DeviceProfile, stack: str
) -> None:
    """The fitted projection model (``vlabench project``) for ``stack``: roofline / share + kernels x dispatch."""
    from vlabench.analysis.projection_fit import host_terms
    from vlabench.analysis.projection_score import fitted_model, model_inputs, project_phases

    model = fitted_model()
    inputs = model_inputs(spec, workload, precision, profile)
    projected = project_phases(inputs, model.parameters, stack, host_terms(profile))
    band = model.error_band(stack)
    apply_projection(
        report,
        projected.phases_ms,
        "fitted model: per-operator roofline / the stack's achieved share of peak + kernels x cost per kernel x "
        f"host factor; leave-one-out error band {'none' if band is None else f'±{band:.0%}'}",
        {"e2e": projected.share_of_peak},
        projected.parameters_source,
    )


def _measured_phases(path: Path, model: str, workload: Workload, precision: str) -> dict[str, float]:
    result: RunResult = load_result(path)
    if result.model.name != model or result.precision != precision:
        raise InputError(
            f"{path}: measured {result.model.name} at {result.precision}, not {model} at {precision}; "
            "the analytic counts must describe the run they are compared with"
        )
    if (result.workload.cameras, result.workload.steps, result.workload.chunk) != (
        workload.cameras,
        workload.steps,
        workload.chunk,
    ):
        raise InputError(f"{path}: its cameras/steps/chunk differ from this roofline's; pass the same knobs")
    return {name: stats.p50 for name, stats in result.timing.phases.items()}


def _feasibility(
    report: RooflineReport, spec, workload: Workload, precision: str, profile: DeviceProfile, control_hz: float
) -> Feasibility:
    e2e_ms = report.phase("e2e").projected_ms or 0.0
    verdict = gate(e2e_ms, e2e_ms, control_hz, ExecutionModel())  # no p99 is projected: gated on the projection
    footprint_gb = estimate_footprint(spec, workload, precision).total_bytes / 1e9
    memory_gb = profile.memory_gb.value if profile.memory_gb else None
    return Feasibility(
        label="projected",
        e2e_ms=e2e_ms,
        action_hz=verdict.delivered_action_hz,
        control_hz=control_hz,
        meets_control_rate=verdict.meets_target,
        gate=verdict,
        footprint_gb=footprint_gb,
        memory_gb=memory_gb,
        fits_memory=footprint_gb <= memory_gb if memory_gb else None,
    )
