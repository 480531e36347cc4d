"""The timed pass of ``vlabench run``: when it stops, the sensors read through it, the probe after an idle period."""

from __future__ import annotations

import math
from collections.abc import Sequence
from time import perf_counter_ns

import torch

from vlabench.config import LIMITS, RunConfig
from vlabench.measure.stats import P99_BOUND_SAMPLES
from vlabench.measure.timing import Contender, Measurement, Progress, RunnerSettings, after_idle, measure_interleaved
from vlabench.telemetry.counters import Series
from vlabench.telemetry.sensors import SensorCounter


def runner_settings(config: RunConfig) -> RunnerSettings:
    """When timing stops: at ``--duration`` for a sustained run; else after the minimum count (by default the one a
    bound on p99 needs) and duration, or at a cap."""
    if config.duration_s is not None:
        return RunnerSettings(config.warmup, 1, config.duration_s, iteration_cap(config), config.duration_s)
    wanted = config.min_iterations or min(P99_BOUND_SAMPLES, config.max_iterations)
    cap_s = max(config.max_duration_s, config.min_duration_s)
    return RunnerSettings(config.warmup, wanted, config.min_duration_s, config.max_iterations, cap_s)


SUSTAINED_PER_SECOND = 1000
"""A sustained run records at most this many inferences per second of its duration (1 ms each, faster than any VLA
here) so its samples' memory is bounded by its duration."""


def iteration_cap(config: RunConfig) -> int:
    """The most inferences a run may time (what its recorded samples are sized for)."""
    if config.duration_s is None:
        return config.max_iterations
    return min(int(LIMITS["max_iterations"][1]), math.ceil(config.duration_s * SUSTAINED_PER_SECOND))


def timed_pass(
    contenders: Sequence[Contender], config: RunConfig, target: torch.device, progress: Progress | None
) -> tuple[list[Measurement], list[Series], int]:
    """The interleaved measurements (each with its probe after ``--idle-probe`` seconds, when asked), the sensors'
    series through them, and when the pass began (perf_counter ns)."""
    sensors = SensorCounter(config.sensor_period_s, nvml_index=(target.index or 0) if target.type == "cuda" else None)
    began = perf_counter_ns()
    sensors.start()
    try:
        measurements = measure_interleaved(contenders, runner_settings(config), progress)
        if config.idle_probe_s > 0:
            for contender, measurement in zip(contenders, measurements, strict=True):
                measurement.after_idle_ms = after_idle(contender, config.idle_probe_s)
    finally:
        series = sensors.stop()
    return measurements, series, began
