"""Roofline analysis: per-phase and per-layer intensity against device ceilings, achieved rates, and projection.

Each operator's time floor is ``max(FLOPs / peak, bytes / bandwidth)``; a phase's floor is the sum over its
operators (finer than one max over the whole phase, which would let compute-bound and memory-bound operators
hide each other). A projection to a device that is not present either divides the floor by a given efficiency
(``project``) or stores the fitted projection model's phases (``apply_projection``, see ``analysis.projection``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, Field

from vlabench.analysis.flops import count_operators
from vlabench.analysis.operators import AMOUNTS, Operator, Totals, by_layer, total
from vlabench.errors import InputError
from vlabench.hardware.devices import DeviceProfile
from vlabench.kernels.ceilings import MeasuredCeiling
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import Phase

CeilingSource = Literal["datasheet", "measured"]


class Ceiling(BaseModel):
    """A compute peak and a memory bandwidth at one precision, and where they came from."""

    source: CeilingSource
    precision: str
    peak_tflops: float = Field(gt=0)
    bandwidth_gbs: float = Field(gt=0)
    detail: str

    @property
    def ridge(self) -> float:
        """Intensity (FLOP/B) where the compute roof meets the memory roof."""
        return self.peak_tflops * 1e12 / (self.bandwidth_gbs * 1e9)

    def attainable_tflops(self, intensity: float) -> float:
        return min(self.peak_tflops, intensity * self.bandwidth_gbs / 1e3)

    def floor_s(self, flops: float, moved_bytes: float) -> float:
        return max(flops / (self.peak_tflops * 1e12), moved_bytes / (self.bandwidth_gbs * 1e9))

    def bound(self, intensity: float) -> Literal["compute", "memory"]:
        return "compute" if intensity >= self.ridge else "memory"


def datasheet_ceiling(profile: DeviceProfile, precision: str) -> Ceiling | None:
    """The profile's peak at ``precision`` and its bandwidth, when it has both."""
    peak = profile.peak_tflops.get(precision)  # type: ignore[call-overload]
    if peak is None or profile.bandwidth_gbs is None:
        return None
    estimate = " (estimate)" if peak.estimate or profile.bandwidth_gbs.estimate else ""
    return Ceiling(
        source="datasheet",
        precision=precision,
        peak_tflops=peak.value,
        bandwidth_gbs=profile.bandwidth_gbs.value,
        detail=f"peak: {peak.source}; bandwidth: {profile.bandwidth_gbs.source}{estimate}",
    )


def measured_ceiling(measured: Iterable[MeasuredCeiling], precision: str) -> Ceiling | None:
    by_quantity = {m.quantity: m for m in measured}
    gemm, bandwidth = by_quantity.get(f"gemm_{precision}"), by_quantity.get("memory_bandwidth")
    if gemm is None or bandwidth is None:
        return None
    return Ceiling(
        source="measured",
        precision=precision,
        peak_tflops=gemm.value,
        bandwidth_gbs=bandwidth.value,
        detail=f"{gemm.detail}; {bandwidth.detail}",
    )


class Bound(BaseModel):
    """One phase (or layer) against one ceiling."""

    ridge: float
    bound: Literal["compute", "memory"]
    attainable_tflops: float
    floor_ms: float


class PhaseRoofline(BaseModel):
    phase: str
    flops: float
    weight_bytes: float
    activation_bytes: float
    kv_bytes: float
    intensity: float
    weight_intensity: float = Field(description="FLOP per weight byte (the convention of the XPU paper's Fig. 6)")
    bounds: dict[CeilingSource, Bound]
    measured_ms: float | None = None
    achieved_tflops: float | None = Field(default=None, description="analytic FLOPs / measured p50 latency")
    share_of_attainable: float | None = Field(default=None, description="floor / measured, on the primary ceiling")
    projected_ms: float | None = None


class LayerRoofline(BaseModel):
    phase: str
    block: str
    layer: int | None
    flops: float
    bytes: float
    weight_bytes: float
    intensity: float
    weight_intensity: float
    bound: Literal["compute", "memory"] | None
    floor_ms: float | None


class OperatorRoofline(BaseModel):
    """One operator kind of one phase summed over its layers (e.g. every prefill ``gate_proj``)."""

    phase: str
    block: str
    name: str
    count: int
    flops: float
    bytes: float
    intensity: float
    floor_ms: float | None


class Projection(BaseModel):
    label: Literal["projected"] = "projected"
    method: str
    efficiency: dict[str, float]
    efficiency_source: str


class RooflineReport(BaseModel):
    """The roofline block stored in results and printed by ``vlabench roofline``."""

    model: str
    device: str
    precision: str
    cameras: int
    steps: int
    computed_steps: int = Field(description="steps that call the expert (fewer with DP-Cache)")
    hoisted: bool = Field(default=False, description="expert prefix K/V projections moved into the prefill")
    prefix_tokens: int
    suffix_tokens: int
    conventions: str
    ceilings: list[Ceiling]
    primary: CeilingSource | None = Field(description="the ceiling verdicts use: measured when present")
    phases: list[PhaseRoofline]
    layers: list[LayerRoofline]
    operators: list[OperatorRoofline]
    projection: Projection | None = None

    def phase(self, name: str) -> PhaseRoofline:
        return next(p for p in self.phases if p.phase == name)

    def ceiling(self, source: CeilingSource) -> Ceiling | None:
        return next((c for c in self.ceilings if c.source == source), None)


CONVENTIONS = (
    "matmul 2·M·K·N, attention 4·S·T·head_dim per head, elementwise ops 0 FLOP; bytes = weights + operator "
    "inputs/outputs + prefix K/V cache traffic, each read once per operator (no fusion); denoise_step is one step, "
    "action = computed steps × denoise_step; floors sum max(FLOPs/peak, bytes/bandwidth) over operators"
)


def analyze(
    spec: ModelSpec,
    workload: Workload,
    precision: str,
    device: str,
    ceilings: list[Ceiling],
    measured_ms: Mapping[str, float] | None = None,
    top_operators: int = 12,
    computed_steps: int | None = None,
    hoisted: bool = False,
) -> RooflineReport:
    """Analytic counts of every phase, layer and operator kind, against each ceiling, with achieved rates where
    ``measured_ms`` (p50 per phase: vision, prefill, denoise_step, action, e2e) is given. ``computed_steps``
    (DP-Cache) scales the action phase to the steps that call the expert; ``hoisted`` moves the expert's prefix
    K/V projections into the prefill."""
    operators = count_operators(spec, workload, precision, hoisted)
    primary = _primary(ceilings)
    grouped = _phase_operators(operators, computed_steps or workload.steps)
    phases = [_phase_row(name, ops, ceilings) for name, ops in grouped.items()]
    for row in phases:
        measured = (measured_ms or {}).get(row.phase)
        if measured:
            row.measured_ms = measured
            row.achieved_tflops = row.flops / (measured / 1e3) / 1e12
            if primary is not None:
                row.share_of_attainable = row.bounds[primary.source].floor_ms / measured
    return RooflineReport(
        model=spec.name,
        device=device,
        precision=precision,
        cameras=workload.cameras,
        steps=workload.steps,
        computed_steps=computed_steps or workload.steps,
        hoisted=hoisted,
        prefix_tokens=workload.prefix_tokens,
        suffix_tokens=workload.suffix_tokens,
        conventions=CONVENTIONS,
        ceilings=ceilings,
        primary=primary.source if primary else None,
        phases=phases,
        layers=_layer_rows(operators, primary),
        operators=_operator_rows(operators, primary)[:top_operators],
    )


def project(report: RooflineReport, efficiency: Mapping[str, float], source: str) -> RooflineReport:
    """Per-phase latency = floor on the primary ceiling / efficiency (``e2e`` efficiency for phases not given)."""
    if report.primary is None:
        raise InputError(f"no ceilings for {report.device} at {report.precision}: nothing to project from")
    for value in efficiency.values():
        if not 0 < value <= 1.5:
            raise InputError(f"efficiency {value:g} is outside (0, 1.5]: it is the share of the roofline reached")
    phases = {p.phase: p for p in report.phases}
    used: dict[str, float] = {}
    for name in Phase.MODEL:
        used[name] = efficiency.get(name, efficiency.get("e2e", 1.0))
        phases[name].projected_ms = phases[name].bounds[report.primary].floor_ms / used[name]
    phases["action"].projected_ms = phases["denoise_step"].projected_ms * report.computed_steps  # type: ignore[operator]
    phases["e2e"].projected_ms = sum(phases[n].projected_ms for n in Phase.END_TO_END_PARTS)  # type: ignore[misc]
    report.projection = Projection(
        method="per-operator roofline floor on the primary ceiling, divided by a per-phase efficiency",
        efficiency=used,
        efficiency_source=source,
    )
    return report


def apply_projection(
    report: RooflineReport, phases_ms: Mapping[str, float], method: str, efficiency: Mapping[str, float], source: str
) -> RooflineReport:
    """Store a projection computed elsewhere (``analysis.projection``): vision, prefill, action and e2e in ms;
    one denoising step is the action phase over the steps computed."""
    phases = {p.phase: p for p in report.phases}
    for name in ("vision", "prefill", "action", "e2e"):
        phases[name].projected_ms = phases_ms[name]
    phases["denoise_step"].projected_ms = phases_ms["action"] / report.computed_steps
    report.projection = Projection(method=method, efficiency=dict(efficiency), efficiency_source=source)
    return report


def efficiency_from(report: RooflineReport) -> dict[str, float]:
    """Per-phase share of the roofline a measured report reached (floor / measured p50)."""
    found = {p.phase: p.share_of_attainable for p in report.phases if p.share_of_attainable}
    needed = Phase.MODEL
    if not all(name in found for name in needed):
        raise InputError("the calibration result has no measured vision/prefill/denoise_step latency with ceilings")
    return {name: found[name] for name in (*needed, "e2e") if name in found}  # type: ignore[misc]


def _primary(ceilings: list[Ceiling]) -> Ceiling | None:
    by_source = {c.source: c for c in ceilings}
    return by_source.get("measured") or by_source.get("datasheet")


def _phase_operators(operators: list[Operator], steps: int) -> dict[str, list[Operator]]:
    grouped: dict[str, list[Operator]] = {name: [op for op in operators if op.phase == name] for name in Phase.MODEL}
    grouped["action"] = [op.model_copy(update=_scaled(op, steps)) for op in grouped["denoise_step"]]
    grouped["e2e"] = [*grouped["vision"], *grouped["prefill"], *grouped["action"]]
    return grouped


def _scaled(op: Operator, factor: int) -> dict[str, float]:
    return {name: getattr(op, name) * factor for name in AMOUNTS}


def _floor_ms(operators: Iterable[Operator], ceiling: Ceiling) -> float:
    return sum(ceiling.floor_s(op.flops, op.bytes) for op in operators) * 1e3


def _phase_row(name: str, operators: list[Operator], ceilings: list[Ceiling]) -> PhaseRoofline:
    sums: Totals = total(operators)
    return PhaseRoofline(
        phase=name,
        flops=sums.flops,
        weight_bytes=sums.weight_bytes,
        activation_bytes=sums.activation_bytes,
        kv_bytes=sums.kv_read_bytes + sums.kv_write_bytes,
        intensity=sums.intensity,
        weight_intensity=sums.flops / sums.weight_bytes if sums.weight_bytes else 0.0,
        bounds={
            c.source: Bound(
                ridge=c.ridge,
                bound=c.bound(sums.intensity),
                attainable_tflops=c.attainable_tflops(sums.intensity),
                floor_ms=_floor_ms(operators, c),
            )
            for c in ceilings
        },
    )


def _layer_rows(operators: list[Operator], ceiling: Ceiling | None) -> list[LayerRoofline]:
    rows = []
    for (phase, block, layer), sums in by_layer(operators).items():
        ops = [op for op in operators if (op.phase, op.block, op.layer) == (phase, block, layer)]
        rows.append(
            LayerRoofline(
                phase=phase,
                block=block,
                layer=layer,
                flops=sums.flops,
                bytes=sums.bytes,
                weight_bytes=sums.weight_bytes,
                intensity=sums.intensity,
                weight_intensity=sums.flops / sums.weight_bytes if sums.weight_bytes else 0.0,
                bound=ceiling.bound(sums.intensity) if ceiling else None,
                floor_ms=_floor_ms(ops, ceiling) if ceiling else None,
            )
        )
    return rows


def _operator_rows(operators: list[Operator], ceiling: Ceiling | None) -> list[OperatorRoofline]:
    """Operator kinds summed over layers, heaviest first (by floor time, else by FLOPs)."""
    groups: dict[tuple[str, str, str], list[Operator]] = defaultdict(list)
    for op in operators:
        groups[(op.phase, op.block, op.name)].append(op)
    rows = []
    for (phase, block, name), ops in groups.items():
        sums = total(ops)
        rows.append(
            OperatorRoofline(
                phase=phase,
                block=block,
                name=name,
                count=len(ops),
                flops=sums.flops,
                bytes=sums.bytes,
                intensity=sums.intensity,
                floor_ms=_floor_ms(ops, ceiling) if ceiling else None,
            )
        )
    return sorted(rows, key=lambda r: (r.floor_ms or 0.0, r.flops), reverse=True)


def ceilings_for(profile: DeviceProfile, precision: str, measured: Iterable[MeasuredCeiling] = ()) -> list[Ceiling]:
    """The datasheet ceiling (when the profile has one) and the measured one (when given), in that order."""
    found = [datasheet_ceiling(profile, precision), measured_ceiling(measured, precision)]
    return [c for c in found if c is not None]
