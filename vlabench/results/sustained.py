"""What a run records beyond its latency statistics: the cold start (preparation stage by stage, the first inference,
one after an idle period), latency percentiles per time window, and the thermal, clock and throttle sensors'
trace through the timed pass, with what they say about throttling."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from pydantic import Field

from vlabench.measure.cold_start import STAGES, Preparation
from vlabench.results.header import Stored
from vlabench.telemetry.counters import Series
from vlabench.telemetry.sensors import SERIES_UNITS

DRIFT_WARNING = 0.10
"""A last window's p50 this much above (or below) the first window's is reported as drift."""
CLOCK_DROP_WARNING = 0.10
"""A clock this much below its first reading at the end of the pass is reported as throttling."""


class StageTime(Stored):
    seconds: float = Field(description="wall time of the stage without its inner stages")
    cached: bool = Field(description="an artifact of an earlier run was reused instead of doing the work")


class ColdStart(Stored):
    """From nothing to the first action: the backend's preparation (its stages disjoint, their sum ≤ prepare_s),
    then the first inference (``timing.first_inference_ms``)."""

    prepare_s: float = Field(description="the backend's whole preparation, wall clock")
    stages: dict[str, StageTime] = Field(description="stage (see measure.cold_start.STAGES) → its time")
    to_first_action_s: float = Field(description="prepare_s + the first inference")
    idle_s: float | None = Field(default=None, description="the idle period before after_idle_ms (None: not probed)")
    after_idle_ms: float | None = Field(default=None, description="an inference's latency after idle_s of nothing")


def cold_start(
    preparation: Preparation | None, first_inference_ms: float, idle_s: float, after_idle_ms: float | None
) -> ColdStart | None:
    """None when the policy was prepared outside ``prepare_contender`` (nothing was timed)."""
    if preparation is None:
        return None
    stages = {
        name: StageTime(seconds=timed.seconds, cached=timed.cached)
        for name in STAGES
        if (timed := preparation.stages.get(name)) is not None
    }
    return ColdStart(
        prepare_s=preparation.seconds,
        stages=stages,
        to_first_action_s=preparation.seconds + first_inference_ms / 1000,
        idle_s=idle_s if after_idle_ms is not None else None,
        after_idle_ms=after_idle_ms,
    )


class LatencyWindow(Stored):
    """End-to-end latency over one window of the timed pass (seconds since the pass, warm-up included, began)."""

    start_s: float
    end_s: float
    count: int
    p50: float
    p99: float
    max: float


class SensorSample(Stored):
    t_s: float = Field(description="seconds since the pass began (its warm-up included)")
    values: dict[str, dict[str, float]] = Field(description="series → sensor → value")


class Sustained(Stored):
    """How latency and the machine held up through the timed pass."""

    window_s: float
    windows: list[LatencyWindow]
    p50_drift: float | None = Field(
        description="last full window's p50 / first full window's − 1 (``full_windows``); None with fewer than two"
    )
    sensor_period_s: float
    units: dict[str, str] = Field(default_factory=lambda: dict(SERIES_UNITS))
    sensors: list[SensorSample] = Field(description="one reading at the start, one per period, one at the end")
    throttling: list[str] = Field(description="what the sensors say changed: throttle events, clocks that fell")


def latency_windows(
    starts_ns: list[int], samples_ms: list[float], began_ns: int, window_s: float
) -> list[LatencyWindow]:
    """The inferences grouped by the window their start falls in; windows without one are left out."""
    grouped: dict[int, list[float]] = defaultdict(list)
    window_ns = max(1, round(window_s * 1e9))
    for start, latency in zip(starts_ns, samples_ms, strict=True):
        grouped[(start - began_ns) // window_ns].append(latency)
    windows = []
    for index in sorted(grouped):
        values = np.asarray(grouped[index])
        p50, p99 = (float(v) for v in np.percentile(values, [50, 99]))
        windows.append(
            LatencyWindow(
                start_s=round(index * window_ns / 1e9, 9),
                end_s=round((index + 1) * window_ns / 1e9, 9),
                count=values.size,
                p50=p50,
                p99=p99,
                max=float(values.max()),
            )
        )
    return windows


def full_windows(windows: list[LatencyWindow]) -> list[LatencyWindow]:
    """Windows with at least half the median window's inferences: the pass's partial first and last windows (the
    warm-up, the end) are left out of the drift."""
    if not windows:
        return []
    median = float(np.median([window.count for window in windows]))
    return [window for window in windows if window.count >= median / 2]


def sensor_samples(series: list[Series], began_ns: int) -> list[SensorSample]:
    """The counter's series regrouped as readings in time order (a reading is the values taken at one instant)."""
    by_time: dict[int, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for track in series:
        for key, samples in track.samples.items():
            for sample in samples:
                by_time[sample.end_ns][track.name][key] = sample.value
    return [
        SensorSample(t_s=(at - began_ns) / 1e9, values={name: dict(values) for name, values in readings.items()})
        for at, readings in sorted(by_time.items())
    ]


def throttling(samples: list[SensorSample]) -> list[str]:
    """Throttle counters that grew, NVML clock-event reasons raised, clocks that ended ≥ 10% below their start."""
    if len(samples) < 2:
        return []
    first, last = samples[0].values, samples[-1].values
    found = []
    for sensor, end in last.get("throttle_events", {}).items():
        start = first.get("throttle_events", {}).get(sensor)
        peak = max(sample.values.get("throttle_events", {}).get(sensor, 0.0) for sample in samples)
        if sensor.startswith("gpu") and peak > 0:
            found.append(f"{sensor}: up to {peak:g} active during the pass")
        elif start is not None and end > start:
            found.append(f"{sensor} throttle events: +{end - start:g}")
    for sensor, end in last.get("clock_mhz", {}).items():
        start = first.get("clock_mhz", {}).get(sensor)
        if start and end < start * (1 - CLOCK_DROP_WARNING):
            found.append(f"{sensor} clock {start:.0f} → {end:.0f} MHz ({end / start - 1:+.0%})")
    return found


def sustained(
    measurement_starts_ns: list[int],
    e2e_ms: list[float],
    began_ns: int,
    window_s: float,
    series: list[Series],
    sensor_period_s: float,
) -> Sustained:
    windows = latency_windows(measurement_starts_ns, e2e_ms, began_ns, window_s)
    full = full_windows(windows)
    drift = full[-1].p50 / full[0].p50 - 1 if len(full) > 1 else None
    samples = sensor_samples(series, began_ns)
    return Sustained(
        window_s=window_s,
        windows=windows,
        p50_drift=drift,
        sensor_period_s=sensor_period_s,
        sensors=samples,
        throttling=throttling(samples),
    )
