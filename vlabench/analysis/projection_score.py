"""The projection model's inputs per (model, device, precision, workload), its fit on every published latency, and
its leave-one-out score: each entry is projected with parameters fitted on the *other* entries only."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np
from pydantic import BaseModel, Field

from vlabench.analysis.operator_mix import OperatorMix
from vlabench.analysis.projection_cache import cached, model_facts
from vlabench.analysis.projection_fit import (
    FittedParameters,
    HostTerms,
    Observation,
    StackParameters,
    fit,
    get_stack,
    host_terms,
    stacks,
)
from vlabench.analysis.reported import ReportedLatency, reported_latencies
from vlabench.analysis.roofline import datasheet_ceiling
from vlabench.errors import InputError
from vlabench.hardware.devices import DeviceProfile, load_device_profile
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.models.workload import Workload

PHASES = ("vision", "prefill", "action", "e2e")
STEPS = ("vision", "prefill", "action")


@dataclass(frozen=True)
class Inputs:
    """Per phase (vision, prefill, action): the operators on the datasheet ceiling; the kernels under each counting
    scheme per phase and end to end; the datasheet peak at the precision (device-side kernel time)."""

    mixes: dict[str, OperatorMix]
    kernels: dict[str, dict[str, int]]
    peak_tflops: float

    def floor_ms(self, phase: str, share: float = 1.0, bandwidth_share: float = 1.0) -> float:
        """The phase's roofline floor at these achieved shares (1 and 1: the datasheet floor); e2e sums them."""
        names = STEPS if phase == "e2e" else (phase,)
        return sum(self.mixes[name].floor_ms(share, bandwidth_share) for name in names)

    @property
    def roofline_ms(self) -> dict[str, float]:
        return {phase: self.floor_ms(phase) for phase in PHASES}

    @cached_property
    def end_to_end(self) -> OperatorMix:
        """Every phase's operators in one mix (the e2e floor is their sum at any shares), built once per inputs."""
        parts = [self.mixes[name] for name in STEPS]
        return OperatorMix.of(
            [float(f) for m in parts for f in np.diff(m.cum_flops)],
            [float(b) for m in parts for b in np.diff(m.cum_bytes)],
            parts[0].peak / 1e9,
            parts[0].bandwidth / 1e6,
        )


class PhaseProjection(BaseModel):
    phases_ms: dict[str, float]
    kernels: dict[str, int]
    share_of_peak: float
    share_of_bandwidth: float
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
    repeats = {"vision": 1, "prefill": 1, "denoise_step": workload.steps}
    named = {"vision": "vision", "prefill": "prefill", "denoise_step": "action"}
    mixes = {
        named[key]: OperatorMix.of(
            [f * repeats[key] for f, _, _ in ops],
            [b * repeats[key] for _, b, _ in ops],
            ceiling.peak_tflops,
            ceiling.bandwidth_gbs,
        )
        for key, ops in facts.operators.items()
    }
    return Inputs(
        mixes=mixes,
        kernels={scheme: facts.kernels.per_phase(scheme, workload.steps) for scheme in ("eager", "fused")},
        peak_tflops=ceiling.peak_tflops,
    )


@cache
def entry_inputs(model: str, device: str, precision: str, cameras: int, steps: int) -> Inputs:
    spec = load_model_spec(model)
    return model_inputs(spec, Workload.from_spec(spec, cameras, steps), precision, load_device_profile(device))


def floor_ms(inputs: Inputs, stack: StackParameters, phase: str) -> float:
    """The phase's roofline floor at the stack's achieved shares of peak compute and bandwidth."""
    return inputs.floor_ms(phase, stack.share_of_peak, stack.share_of_bandwidth)


def project_phases(inputs: Inputs, params: FittedParameters, stack: str, host: HostTerms) -> PhaseProjection:
    """Every phase: roofline / share of peak + kernels × (dispatch cost × host factor + device-side kernel time);
    the device is busy for the first term and the device-side kernel time."""
    definition = get_stack(stack)
    own, source = params.for_stack(stack)
    factor, host_source = params.host(host) if definition.host_bound else (1.0, "graph replay: no host factor")
    kernels = inputs.kernels[definition.kernel_scheme]
    device_kernel_ms = params.kernel_gflop / inputs.peak_tflops
    busy = {p: floor_ms(inputs, own, p) + kernels[p] * device_kernel_ms for p in PHASES}
    phases = {phase: busy[phase] + kernels[phase] * own.dispatch_us / 1e3 * factor for phase in PHASES}
    return PhaseProjection(
        phases_ms=phases,
        kernels=kernels,
        share_of_peak=own.share_of_peak,
        share_of_bandwidth=own.share_of_bandwidth,
        dispatch_us=own.dispatch_us,
        host_factor=factor,
        busy_share=busy["e2e"] / phases["e2e"],
        parameters_source=(
            f"{stack}: {source}; host factor {factor:.3g} ({host_source}); "
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
        host=host_terms(load_device_profile(entry.device)),
        mix=inputs.end_to_end,
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
    scored = [e for e in entries if "e2e" in e.phases_ms]
    observations = [observation(e) for e in scored]
    scores = []
    for entry, held_out in zip(scored, observations, strict=True):
        params = fit([o for o in observations if o.label != held_out.label])
        inputs = entry_inputs(entry.model, entry.device, entry.precision, entry.cameras, entry.steps)
        projected = project_phases(inputs, params, entry.stack, held_out.host)
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
        "observations": [{**vars(o), "mix": o.mix.digest()} for o in (observation(e) for e in entries)],
        "stacks": [s.model_dump(mode="json") for s in stacks().values()],
    }


@cache
def fitted_parameters() -> FittedParameters:
    """The parameters fitted on every entry of ``profiles/reported/latencies.yaml``, without the leave-one-out
    scores (from memory, the disk cache, or fitted)."""
    return parameters_for(_entries())


def parameters_for(entries: list[ReportedLatency]) -> FittedParameters:
    """The parameters fitted on ``entries`` (from the disk cache, or fitted): keyed by the entries themselves, so a
    fit is never stored or read under another set's key."""
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
        lambda: FittedModel(parameters=parameters_for(entries), scores=score_projections(entries)),
    )
