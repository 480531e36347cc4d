"""The projection model's inputs per (model, device, precision, workload), its fit on every published latency, and
its leave-one-out score: each entry is projected with parameters fitted on the *other* entries only."""

from __future__ import annotations

import statistics
from functools import cache

from pydantic import BaseModel, Field

from vlabench.analysis.projection_cache import cached, model_facts
from vlabench.analysis.projection_fit import FittedParameters, Observation, fit, get_stack, stacks
from vlabench.analysis.reported import ReportedLatency, reported_latencies
from vlabench.analysis.roofline import datasheet_ceiling
from vlabench.errors import InputError
from vlabench.hardware.devices import DeviceProfile, load_device_profile
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.models.workload import Workload

PHASES = ("vision", "prefill", "action", "e2e")


class Inputs(BaseModel):
    """Per phase: the roofline floor on the datasheet ceiling and the kernels under each counting scheme."""

    roofline_ms: dict[str, float]
    kernels: dict[str, dict[str, int]] = Field(description="scheme -> phase -> kernels")
    peak_tflops: float = Field(gt=0, description="the datasheet peak at the precision (device-side kernel time)")


class PhaseProjection(BaseModel):
    phases_ms: dict[str, float]
    kernels: dict[str, int]
    share_of_peak: float
    dispatch_us: float
    host_factor: float
    busy_share: float = Field(description="share of the e2e latency the device spends in kernels (roofline part)")
    parameters_source: str


def model_inputs(spec: ModelSpec, workload: Workload, precision: str, profile: DeviceProfile) -> Inputs:
    """The roofline floor per phase (sum over operators of max(FLOPs/peak, bytes/bandwidth) on the datasheet
    ceiling, as ``roofline.analyze`` computes it) and kernel counts per phase under both schemes."""
    ceiling = datasheet_ceiling(profile, precision)
    if ceiling is None:
        raise InputError(f"{profile.name} has no {precision} peak and bandwidth in its profile: nothing to project on")
    facts = model_facts(spec, workload, precision)
    peak, bandwidth = ceiling.peak_tflops * 1e9, ceiling.bandwidth_gbs * 1e6  # per ms
    floors = {phase: sum(max(f / peak, b / bandwidth) for f, b, _ in ops) for phase, ops in facts.operators.items()}
    roofline = {
        "vision": floors["vision"],
        "prefill": floors["prefill"],
        "action": floors["denoise_step"] * workload.steps,
    }
    return Inputs(
        roofline_ms={**roofline, "e2e": sum(roofline.values())},
        kernels={scheme: facts.kernels.per_phase(scheme, workload.steps) for scheme in ("eager", "fused")},
        peak_tflops=ceiling.peak_tflops,
    )


@cache
def entry_inputs(model: str, device: str, precision: str, cameras: int, steps: int) -> Inputs:
    spec = load_model_spec(model)
    return model_inputs(spec, Workload.from_spec(spec, cameras, steps), precision, load_device_profile(device))


def project_phases(inputs: Inputs, params: FittedParameters, stack: str, device: str, kind: str) -> PhaseProjection:
    """Every phase: roofline / share of peak + kernels × (dispatch cost × host factor + device-side kernel time);
    the device is busy for the first term and the device-side kernel time."""
    definition = get_stack(stack)
    own, source = params.for_stack(stack)
    host, host_source = params.host(device, kind) if definition.host_bound else (1.0, "graph replay: no host factor")
    kernels = inputs.kernels[definition.kernel_scheme]
    device_kernel_ms = params.kernel_gflop / inputs.peak_tflops
    busy = {p: inputs.roofline_ms[p] / own.share_of_peak + kernels[p] * device_kernel_ms for p in PHASES}
    phases = {phase: busy[phase] + kernels[phase] * own.dispatch_us / 1e3 * host for phase in PHASES}
    return PhaseProjection(
        phases_ms=phases,
        kernels=kernels,
        share_of_peak=own.share_of_peak,
        dispatch_us=own.dispatch_us,
        host_factor=host,
        busy_share=busy["e2e"] / phases["e2e"],
        parameters_source=(
            f"{stack}: {source}; host factor {host:.3g} ({host_source}); "
            f"{device_kernel_ms * 1e3:.2g} µs device-side per kernel"
        ),
    )


def observation(entry: ReportedLatency, observed_ms: float | None = None) -> Observation:
    inputs = entry_inputs(entry.model, entry.device, entry.precision, entry.cameras, entry.steps)
    scheme = get_stack(entry.stack).kernel_scheme
    return Observation(
        label=f"{entry.model} {entry.device} {entry.stack} {entry.precision}",
        stack=entry.stack,
        device=entry.device,
        device_kind=load_device_profile(entry.device).kind,
        roofline_ms=inputs.roofline_ms["e2e"],
        kernels=inputs.kernels[scheme]["e2e"],
        peak_tflops=inputs.peak_tflops,
        observed_ms=observed_ms if observed_ms is not None else entry.phases_ms["e2e"],
    )


class ProjectionScore(BaseModel):
    """One published phase latency against its roofline floor and its leave-one-out projection."""

    entry: ReportedLatency
    phase: str
    reported_ms: float
    floor_ms: float
    floor_error: float = Field(description="(floor - reported) / reported")
    projected_ms: float
    projected_error: float = Field(description="(projected - reported) / reported, parameters fitted without it")
    kernels: int
    share_of_peak: float
    dispatch_us: float
    host_factor: float
    parameters_source: str
    fitted_on: int = Field(description="observations the held-out fit used")


def score_projections(entries: list[ReportedLatency]) -> list[ProjectionScore]:
    """For every entry: fit on every *other* entry, project this one, and compare each of its published phases."""
    observations = [observation(e) for e in entries if "e2e" in e.phases_ms]
    scores = []
    for entry in entries:
        if "e2e" not in entry.phases_ms:
            continue
        held_out = observation(entry).label
        params = fit([o for o in observations if o.label != held_out])
        kind = load_device_profile(entry.device).kind
        inputs = entry_inputs(entry.model, entry.device, entry.precision, entry.cameras, entry.steps)
        projected = project_phases(inputs, params, entry.stack, entry.device, kind)
        for phase, reported in entry.phases_ms.items():
            floor, value = inputs.roofline_ms[phase], projected.phases_ms[phase]
            scores.append(
                ProjectionScore(
                    entry=entry,
                    phase=phase,
                    reported_ms=reported,
                    floor_ms=floor,
                    floor_error=(floor - reported) / reported,
                    projected_ms=value,
                    projected_error=(value - reported) / reported,
                    kernels=projected.kernels[phase],
                    share_of_peak=projected.share_of_peak,
                    dispatch_us=projected.dispatch_us,
                    host_factor=projected.host_factor,
                    parameters_source=projected.parameters_source,
                    fitted_on=len(params.observations),
                )
            )
    return scores


class FittedModel(BaseModel):
    """Parameters fitted on every published entry, with the leave-one-out scores that give each stack's band."""

    parameters: FittedParameters
    scores: list[ProjectionScore]

    def error_band(self, stack: str) -> float | None:
        """Median |leave-one-out e2e error| of the stack's own entries (None: no entry of its own to score)."""
        errors = [abs(s.projected_error) for s in self.scores if s.phase == "e2e" and s.entry.stack == stack]
        return statistics.median(errors) if errors else None


def _entries() -> list[ReportedLatency]:
    return [e for e in reported_latencies() if "e2e" in e.phases_ms]


def _fit_identity(entries: list[ReportedLatency]) -> dict:
    """Everything a fit on ``entries`` depends on: the entries, their model inputs, the stacks' definitions."""
    return {
        "entries": [e.model_dump(mode="json") for e in entries],
        "observations": [vars(observation(e)) for e in entries],
        "stacks": [s.model_dump(mode="json") for s in stacks().values()],
    }


@cache
def fitted_parameters() -> FittedParameters:
    """The parameters fitted on every entry of ``profiles/reported/latencies.yaml``, without the leave-one-out
    scores (from memory, the disk cache, or fitted)."""
    entries = _entries()
    return cached("fit", _fit_identity(entries), FittedParameters, lambda: fit([observation(e) for e in entries]))


@cache
def fitted_model() -> FittedModel:
    """The parameters with the leave-one-out scores that give each stack's error band (from memory, the disk
    cache, or fitted: one fit per entry)."""
    entries = _entries()
    return cached(
        "loo",
        _fit_identity(entries),
        FittedModel,
        lambda: FittedModel(parameters=fitted_parameters(), scores=score_projections(entries)),
    )
