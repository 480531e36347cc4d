"""The projection model applied (``project_phases``), its fit on every published latency, and its grouped
validation: every entry is projected with parameters fitted without it, and without every other entry of its
source (leave-one-source-out) or of its device (leave-one-device-out), so a score predicts a new source's error."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Literal

from pydantic import BaseModel, Field

from vlabench.analysis.projection_bands import BandTable, band_table
from vlabench.analysis.projection_cache import cached
from vlabench.analysis.projection_fit import (
    FittedParameters,
    HostTerms,
    Observation,
    Term,
    fit,
)
from vlabench.analysis.projection_inputs import PARTS, PHASES, STEPS, Inputs, entry_inputs, model_inputs
from vlabench.analysis.projection_stacks import get_stack, stacks
from vlabench.analysis.reported import ReportedLatency, reported_latencies
from vlabench.hardware.devices import load_device_profile

__all__ = ["PHASES", "STEPS", "Inputs", "entry_inputs", "fit", "model_inputs", "reported_latencies"]
Scheme = Literal["loo", "loso", "lodo"]
SCHEMES: dict[Scheme, str] = {
    "loo": "leave-one-out (one entry)",
    "loso": "leave-one-source-out (every entry of its source)",
    "lodo": "leave-one-device-out (every entry on its device)",
}


class PhaseProjection(BaseModel):
    phases_ms: dict[str, float]
    kernels: dict[str, int]
    share_of_peak: float
    share_of_bandwidth: float
    dispatch_us: float
    host_factor: float
    busy_share: float = Field(description="share of the e2e latency the device spends in kernels (roofline part)")
    parameters_source: str


def phase_ms(
    inputs: Inputs, params: FittedParameters, stack: str, factor: float, phase: str, device_class: str | None = None
) -> tuple[float, float]:
    """(latency, device-busy time) of one phase (vision, prefill or action) run by ``stack`` on a device of
    ``device_class`` (None: the inputs' device's)."""
    definition = get_stack(stack)
    own, _ = params.for_stack(stack)
    kernels = inputs.kernels[definition.kernel_scheme][phase]
    if device_class is None and inputs.host is not None:
        device_class = inputs.host.device_class
    share, bandwidth = params.shares(stack, device_class)
    floor = inputs.floor_ms(phase, share, bandwidth, definition.activation_precision)
    busy = floor + kernels * params.kernel_gflop / inputs.peak_tflops
    host = factor if definition.host_bound else 1.0
    return busy + kernels * own.dispatch_us / 1e3 * host, busy


def project_phases(
    inputs: Inputs,
    params: FittedParameters,
    stack: str,
    host: HostTerms | None = None,
    phase_stacks: dict[str, str] | None = None,
) -> PhaseProjection:
    """Every phase: roofline / share + kernels × (dispatch cost × host factor + device-side kernel time), each phase
    with its own stack where ``phase_stacks`` names one (``prefix``: vision and prefill); the device is busy for the
    roofline and device-side parts."""
    terms = host or inputs.host
    assert terms is not None, "inputs built without a device carry no host: pass one"
    factor, host_source = params.host(terms)
    chosen = {phase: _stack_of(phase, stack, phase_stacks or {}) for phase in STEPS}
    timed = {phase: phase_ms(inputs, params, chosen[phase], factor, phase, terms.device_class) for phase in STEPS}
    phases = {phase: timed[phase][0] for phase in STEPS}
    phases["e2e"] = sum(phases.values())
    own, source = params.for_stack(stack)
    share, bandwidth = params.shares(stack, terms.device_class)
    definition = get_stack(stack)
    kernels = {p: sum(inputs.kernels[get_stack(chosen[s]).kernel_scheme][s] for s in PARTS[p]) for p in PHASES}
    applied = factor if definition.host_bound else 1.0
    return PhaseProjection(
        phases_ms=phases,
        kernels=kernels,
        share_of_peak=share,
        share_of_bandwidth=bandwidth,
        dispatch_us=own.dispatch_us,
        host_factor=applied,
        busy_share=sum(busy for _, busy in timed.values()) / phases["e2e"],
        parameters_source=(
            f"{stack}: {source}; host factor {applied:.3g} "
            f"({host_source if definition.host_bound else 'graph replay: no host factor'}); "
            f"{params.kernel_gflop / inputs.peak_tflops * 1e3:.2g} µs device-side per kernel"
        ),
    )


def _stack_of(phase: str, stack: str, phase_stacks: dict[str, str]) -> str:
    if phase in phase_stacks:
        return phase_stacks[phase]
    if phase in ("vision", "prefill") and "prefix" in phase_stacks:
        return phase_stacks["prefix"]
    return stack


def inputs_of(entry: ReportedLatency) -> Inputs:
    return entry_inputs(
        entry.model,
        entry.device,
        entry.precision,
        entry.cameras,
        entry.steps,
        entry.prompt_tokens,
        entry.chunk,
        entry.power_mode,
        entry.batch,
    )


def label_of(entry: ReportedLatency) -> str:
    return f"{entry.model} {entry.device} {entry.stack} {entry.precision} ({entry.source_group})"


def observations(entry: ReportedLatency) -> list[Observation]:
    """One observation per published phase of ``entry`` (its e2e without the host time it includes)."""
    inputs = inputs_of(entry)
    found = []
    for phase, value in entry.phases_ms.items():
        parts = PARTS[phase]
        terms = tuple(
            Term(
                stack=entry.stack_of(part),
                mix=inputs.mix(part, get_stack(entry.stack_of(part)).activation_precision),
                kernels=inputs.kernels[get_stack(entry.stack_of(part)).kernel_scheme][part],
                peak_tflops=inputs.peak_tflops,
            )
            for part in parts
        )
        observed = entry.model_e2e_ms if phase == "e2e" else value
        found.append(
            Observation(f"{label_of(entry)} {phase}", entry.source_group, entry.device, inputs.host, terms, observed)
        )
    return found


class ProjectionScore(BaseModel):
    """One published phase latency against its roofline floor and its held-out projection."""

    entry: ReportedLatency
    phase: str
    reported_ms: float = Field(description="the published latency (e2e without the host time it includes)")
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


def _held_out_key(scheme: Scheme) -> Callable[[ReportedLatency], str]:
    return {
        "loo": label_of,
        "loso": lambda e: e.source_group,
        "lodo": lambda e: e.device,
    }[scheme]


def score_projections(entries: list[ReportedLatency], scheme: Scheme = "loo") -> list[ProjectionScore]:
    """For every held-out group of ``scheme``: fit on every *other* entry's published phases, project the group's
    entries, and compare each of their published phases."""
    scored = [e for e in entries if "e2e" in e.phases_ms]
    key = _held_out_key(scheme)
    per_entry = {id(e): observations(e) for e in scored}
    scores = []
    for group in dict.fromkeys(key(e) for e in scored):
        training = [o for e in scored if key(e) != group for o in per_entry[id(e)]]
        if not training:  # nothing left to fit on: the group cannot be scored held out
            continue
        params = fit(training)
        for entry in (e for e in scored if key(e) == group):
            scores += _scores(entry, params, len(training))
    return scores


def _scores(entry: ReportedLatency, params: FittedParameters, fitted_on: int) -> list[ProjectionScore]:
    inputs = inputs_of(entry)
    projected = project_phases(inputs, params, entry.stack, phase_stacks=entry.phase_stacks)
    found = []
    for phase, value in entry.phases_ms.items():
        reported = entry.model_e2e_ms if phase == "e2e" else value
        floor = inputs.roofline_ms[phase]
        predicted = sum(projected.phases_ms[p] for p in PARTS[phase])
        found.append(
            ProjectionScore(
                entry=entry,
                phase=phase,
                reported_ms=reported,
                floor_ms=floor,
                floor_error=(floor - reported) / reported,
                projected_ms=predicted,
                projected_error=(predicted - reported) / reported,
                kernels=projected.kernels.get(phase, 0),
                share_of_peak=projected.share_of_peak,
                dispatch_us=projected.dispatch_us,
                host_factor=projected.host_factor,
                parameters_source=projected.parameters_source,
                fitted_on=fitted_on,
            )
        )
    return found


class FittedModel(BaseModel):
    """Parameters fitted on every published entry, the leave-one-source-out scores, and the bands they give."""

    parameters: FittedParameters
    scores: list[ProjectionScore] = Field(description="leave-one-source-out, every published phase")
    bands: BandTable

    def error_band(self, stack: str, device_class: str | None = None) -> float | None:
        """The grouped-CV band of ``stack`` on ``device_class`` (see ``projection_bands``)."""
        return self.bands.band(stack, device_class).value


def published_entries() -> list[ReportedLatency]:
    """Every published entry with an e2e latency (what the model is fitted on and scored against)."""
    return [e for e in reported_latencies() if "e2e" in e.phases_ms]


def _fit_identity(entries: list[ReportedLatency]) -> dict:
    """Everything a fit on ``entries`` depends on: the entries, their model inputs, the stacks' definitions."""
    return {
        "entries": [e.model_dump(mode="json") for e in entries],
        "observations": [
            {
                "label": o.label,
                "observed": o.observed_ms,
                "host": vars(o.host),
                "mixes": [(t.stack, t.kernels, t.mix.digest()) for t in o.terms],
            }
            for e in entries
            for o in observations(e)
        ],
        "stacks": [s.model_dump(mode="json") for s in stacks().values()],
    }


@cache
def fitted_parameters() -> FittedParameters:
    """The parameters fitted on every entry of ``profiles/reported/latencies.yaml`` (memory, disk cache, or fit)."""
    return parameters_for(published_entries())


def parameters_for(entries: list[ReportedLatency]) -> FittedParameters:
    """The parameters fitted on ``entries`` (from the disk cache, or fitted): keyed by the entries themselves, so a
    fit is never stored or read under another set's key."""
    return cached(
        "fit", _fit_identity(entries), FittedParameters, lambda: fit([o for e in entries for o in observations(e)])
    )


def scores_for(entries: list[ReportedLatency], scheme: Scheme) -> list[ProjectionScore]:
    """The held-out scores of ``scheme`` on ``entries`` (from the disk cache, or one fit per held-out group)."""
    return cached(
        f"scores-{scheme}",
        _fit_identity(entries),
        ScoreList,
        lambda: ScoreList(scores=score_projections(entries, scheme)),
    ).scores


class ScoreList(BaseModel):
    scores: list[ProjectionScore]


@cache
def fitted_model() -> FittedModel:
    """The parameters with the leave-one-source-out scores and the bands they give (memory, disk cache, or fitted:
    one fit per source)."""
    entries = published_entries()
    scores = scores_for(entries, "loso")
    classes = {e.device: load_device_profile(e.device).device_class for e in entries}
    return FittedModel(parameters=parameters_for(entries), scores=scores, bands=band_table(scores, classes))
