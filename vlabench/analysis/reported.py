"""Published latencies (``profiles/reported/latencies.yaml``), each with its source: the ground truth the roofline
projection is scored against. These figures are ``reported``, never presented as vlabench measurements."""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vlabench.yaml_data import load_packaged


class ReportedLatency(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    device: str
    precision: str
    cameras: int = Field(gt=0)
    steps: int = Field(gt=0)
    stack: Literal["jax", "pytorch-eager", "pytorch-compiled", "tuned-kernels"]
    phases_ms: dict[Literal["vision", "prefill", "action", "e2e"], float]
    source: str
    assumed: list[str] = Field(default_factory=list, description="workload knobs the source does not state")
    label: Literal["reported"] = "reported"


class ReportedLatencies(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: list[ReportedLatency]


@cache
def reported_latencies() -> list[ReportedLatency]:
    return load_packaged("reported", "latencies", ReportedLatencies, "reported latencies").entries


class ProjectionScore(BaseModel):
    """One reported latency against the roofline floor and against a leave-one-out calibrated projection."""

    entry: ReportedLatency
    phase: str
    reported_ms: float
    floor_ms: float
    floor_error: float  # (projected - reported) / reported
    efficiency: float  # floor / reported: the share of the roofline the device reached
    calibrated_ms: float | None  # floor / median efficiency of *other* entries: same model and stack, else same stack
    calibrated_error: float | None
    calibration_entries: int


def score_projections(entries: list[ReportedLatency]) -> list[ProjectionScore]:
    """For every reported phase: the roofline floor on the device's datasheet ceiling, and a projection calibrated
    by the median e2e efficiency of the *other* entries (other devices) with the same model and software stack, or
    with the same stack when the model has no other entry: leave-one-out, so no entry is scored against a factor
    fitted to itself."""
    import statistics

    from vlabench.analysis.roofline import analyze, ceilings_for
    from vlabench.hardware.devices import load_device_profile
    from vlabench.models.specs import load_model_spec
    from vlabench.models.workload import Workload

    floors = []
    for entry in entries:
        spec = load_model_spec(entry.model)
        workload = Workload.from_spec(spec, entry.cameras, entry.steps)
        profile = load_device_profile(entry.device)
        report = analyze(spec, workload, entry.precision, entry.device, ceilings_for(profile, entry.precision))
        if report.primary is None:
            raise ValueError(f"{entry.device} has no {entry.precision} ceiling to project {entry.model} on")
        for phase, reported in entry.phases_ms.items():
            floors.append((entry, phase, reported, report.phase(phase).bounds[report.primary].floor_ms))
    scores = []
    for entry, phase, reported, floor in floors:
        same_stack = [(e, f / r) for e, p, r, f in floors if e is not entry and p == "e2e" and e.stack == entry.stack]
        others = [eff for e, eff in same_stack if e.model == entry.model] or [eff for _, eff in same_stack]
        calibrated = floor / statistics.median(others) if others else None
        scores.append(
            ProjectionScore(
                entry=entry,
                phase=phase,
                reported_ms=reported,
                floor_ms=floor,
                floor_error=(floor - reported) / reported,
                efficiency=floor / reported,
                calibrated_ms=calibrated,
                calibrated_error=(calibrated - reported) / reported if calibrated else None,
                calibration_entries=len(others),
            )
        )
    return scores
