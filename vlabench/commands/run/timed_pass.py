"""The timed pass of ``vlabench run``: when it stops, the sensors read through it, the probe after an idle period."""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter_ns

import torch

from vlabench.config import RunConfig
from vlabench.measure.run_settings import runner_settings
from vlabench.measure.timing import Contender, Measurement, Progress, after_idle, measure_interleaved
from vlabench.telemetry.counters import Series
from vlabench.telemetry.sensors import SensorCounter


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
