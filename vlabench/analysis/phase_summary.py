"""The per-phase summary of ``vlabench profile``: duration share, counters, the roofline verdict, and the SM picture
(SM activity, SM occupancy, tensor activity, DRAM utilization, GPU busy), each value labelled with its source.

Sources, best first. SM activity and occupancy: ``GPM`` (NVML GPM, phase-isolated windows, ``telemetry/gpm.py``),
else ``kernels`` (CUPTI kernel records, ``analysis/sm_coverage.py``, over the trace pass's span time). Tensor
activity: ``GPM`` only. DRAM utilization: ``GPM`` (bandwidth used / peak), else ``EMC`` (Jetson tegrastats EMC
load). GPU busy, the "a kernel was running" share the SM columns refine: ``NVML`` (nvmlDeviceGetUtilizationRates)
or ``GR3D`` (tegrastats GR3D_FREQ); both come from counters averaged over ≥ 20 ms (NVML's own window is ≥ 1/6 s,
tegrastats' its interval), so a few-ms phase reads its neighbours' load too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from vlabench.analysis.roofline import RooflineReport
from vlabench.analysis.sm_coverage import GpuSm, KernelPhase
from vlabench.telemetry.counters import Series
from vlabench.telemetry.gpm import GpmWindows
from vlabench.vocab import Phase

ActivitySource = Literal["GPM", "kernels", "NVML", "GR3D", "EMC"]


class CounterStat(BaseModel):
    unit: str
    key: str
    mean: float
    peak: float


class Activity(BaseModel):
    """A share (0 - 1) and the instrument it came from."""

    value: float
    source: ActivitySource


class PhaseSummary(BaseModel):
    phase: str
    spans: int
    mean_ms: float
    share_of_e2e: float
    counters: dict[str, CounterStat]
    intensity: float | None = None
    bound: Literal["compute", "memory"] | None = None
    achieved_tflops: float | None = None
    share_of_attainable: float | None = None
    sm_activity: Activity | None = None
    sm_occupancy: Activity | None = None
    tensor_activity: Activity | None = None
    dram_utilization: Activity | None = None
    gpu_busy: Activity | None = None


class GpmPhase(BaseModel):
    """One phase's GPM windows: time-weighted mean and peak window of each metric (%)."""

    phase: str
    windows: int
    repetitions: int
    metrics: dict[str, CounterStat]


class SmTracing(BaseModel):
    """How the SM columns were measured: the GPU's SM limits, the GPM pass (or why it did not run) and the
    kernel-derived coverage (or why not), each per phase."""

    gpu: GpuSm | None = None
    gpm: dict[str, Any] = Field(default_factory=dict)
    gpm_phases: list[GpmPhase] = Field(default_factory=list)
    kernels: dict[str, Any] = Field(default_factory=dict)
    kernel_phases: list[KernelPhase] = Field(default_factory=list)


def phase_windows(events: Sequence[tuple[str, int, int]]) -> dict[str, list[tuple[int, int]]]:
    """(start, end) ns of every span per summary phase."""
    windows: dict[str, list[tuple[int, int]]] = {}
    for name, start, end in events:
        phase = Phase.of_span(name)
        if phase in Phase.SUMMARY:
            windows.setdefault(phase, []).append((start, end))
    return windows


def phase_samples(events: Sequence[tuple[str, int, int]]) -> dict[str, list[float]]:
    """Span durations (ms) per summary phase."""
    return {phase: [(end - start) / 1e6 for start, end in spans] for phase, spans in phase_windows(events).items()}


def summarize_phases(
    events: Sequence[tuple[str, int, int]],
    series: Sequence[Series],
    roofline: RooflineReport | None,
    tracing: SmTracing | None = None,
) -> list[PhaseSummary]:
    """Per phase: mean duration, share of end-to-end time, and each counter's headline value averaged over the
    phase's spans (weighted by how much of each sample's interval falls inside them) and its peak; the roofline
    verdict; the SM columns from ``tracing`` and the counters."""
    windows = phase_windows(events)
    e2e_total = sum(end - start for start, end in windows.get("e2e", []))
    rows = []
    for phase in Phase.SUMMARY:
        spans = windows.get(phase)
        if not spans:
            continue
        duration = sum(end - start for start, end in spans)
        row = PhaseSummary(
            phase=phase,
            spans=len(spans),
            mean_ms=duration / len(spans) / 1e6,
            share_of_e2e=duration / e2e_total if e2e_total else 0.0,
            counters={s.name: stat for s in series if (stat := counter_stat(s, spans)) is not None},
        )
        if roofline is not None:
            analytic = roofline.phase(phase)
            row.intensity = analytic.intensity
            row.bound = analytic.bounds[roofline.primary].bound if roofline.primary else None
            row.achieved_tflops = analytic.achieved_tflops
            row.share_of_attainable = analytic.share_of_attainable
        fill_sm_columns(row, tracing)
        rows.append(row)
    return rows


def counter_stat(series: Series, spans: Sequence[tuple[int, int]]) -> CounterStat | None:
    key = series.headline or next(iter(series.samples), None)
    if key is None or key not in series.samples:
        return None
    weighted = weight = 0.0
    peak: float | None = None
    for sample in series.samples[key]:
        overlap = sum(max(0, min(end, sample.end_ns) - max(start, sample.start_ns)) for start, end in spans)
        if overlap <= 0:
            continue
        weighted += sample.value * overlap
        weight += overlap
        peak = sample.value if peak is None else max(peak, sample.value)
    if peak is None:
        return None
    return CounterStat(unit=series.unit, key=key, mean=weighted / weight, peak=peak)


def gpm_phases(measured: GpmWindows) -> list[GpmPhase]:
    """Per phase of the GPM pass, each metric over that phase's windows."""
    by_phase: dict[str, list[tuple[int, int]]] = {}
    for phase, start, end in measured.events:
        by_phase.setdefault(phase, []).append((start, end))
    return [
        GpmPhase(
            phase=phase,
            windows=len(spans),
            repetitions=measured.repetitions.get(phase, 0),
            metrics={s.name: stat for s in measured.series if (stat := counter_stat(s, spans)) is not None},
        )
        for phase, spans in by_phase.items()
    ]


def fill_sm_columns(row: PhaseSummary, tracing: SmTracing | None) -> None:
    """The labelled SM columns of one row: GPM first, kernel-derived next; GPU busy and EMC from the counters."""
    gpm = next((g.metrics for g in tracing.gpm_phases if g.phase == row.phase), {}) if tracing else {}
    kernels = next((k for k in tracing.kernel_phases if k.phase == row.phase), None) if tracing else None

    def from_gpm(name: str) -> Activity | None:
        stat = gpm.get(name)
        return Activity(value=stat.mean / 100, source="GPM") if stat is not None else None

    row.sm_activity = from_gpm("gpm sm activity")
    row.sm_occupancy = from_gpm("gpm sm occupancy")
    row.tensor_activity = from_gpm("gpm tensor activity")
    row.dram_utilization = from_gpm("gpm dram bandwidth")
    if kernels is not None:
        row.sm_activity = row.sm_activity or Activity(value=kernels.sm_activity(row.mean_ms), source="kernels")
        row.sm_occupancy = row.sm_occupancy or Activity(value=kernels.warp_occupancy(row.mean_ms), source="kernels")
    emc = row.counters.get("gpu memory utilization")
    if row.dram_utilization is None and emc is not None and emc.key == "emc":
        row.dram_utilization = Activity(value=emc.mean / 100, source="EMC")
    busy = row.counters.get("gpu utilization")
    if busy is not None and busy.key in ("gpu", "gr3d"):
        row.gpu_busy = Activity(value=busy.mean / 100, source="NVML" if busy.key == "gpu" else "GR3D")


SM_COLUMNS = ("sm_activity", "sm_occupancy", "tensor_activity", "dram_utilization", "gpu_busy")


def span_args(row: PhaseSummary | None) -> dict[str, Any] | None:
    """A row's SM columns as Chrome-trace span args: ``<column> %`` and ``<column> source``."""
    cells = {name: cell for name in SM_COLUMNS if row is not None and (cell := getattr(row, name)) is not None}
    args: dict[str, Any] = {}
    for name, cell in cells.items():
        args[f"{name} %"] = round(cell.value * 100, 1)
        args[f"{name} source"] = cell.source
    return args or None
