"""Estimated energy from a linear power model: idle power plus utilization times the TDP headroom."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psutil

from vlabench.telemetry.energy.base import PollingMeter, PowerPoller

PROCESS_CPU_UTILIZATION = (
    "this process's CPU time (all threads) / (wall time x logical cores) over each sampling interval, clamped to [0, 1]"
)


class ProcessCpuUtilization:
    """Callable: this process's share of all logical cores since the previous call (0.0 on the first call)."""

    def __init__(self) -> None:
        self.cores = psutil.cpu_count(logical=True) or 1
        self._previous: tuple[float, float] | None = None

    def __call__(self) -> float:
        now = (time.monotonic(), time.process_time())
        previous, self._previous = self._previous, now
        if previous is None or now[0] <= previous[0]:
            return 0.0
        return (now[1] - previous[1]) / ((now[0] - previous[0]) * self.cores)


class EstimatedMeter(PollingMeter):
    """Energy = integral of idle_w + (tdp_w - idle_w) x utilization, with utilization sampled every period_s."""

    method = "estimated-tdp"
    label = "estimated"

    def __init__(
        self,
        tdp_w: float,
        idle_w: float,
        utilization_fn: Callable[[], float] | None = None,
        *,
        tdp_source: str,
        idle_source: str,
        utilization_definition: str | None = None,
        scope: str = "package",
        period_s: float = 0.1,
    ) -> None:
        if not 0 <= idle_w <= tdp_w:
            raise ValueError(f"need 0 <= idle_w <= tdp_w, got idle_w={idle_w}, tdp_w={tdp_w}")
        self.tdp_w, self.idle_w = tdp_w, idle_w
        self.tdp_source, self.idle_source = tdp_source, idle_source
        if utilization_fn is None:
            utilization_fn, utilization_definition = ProcessCpuUtilization(), PROCESS_CPU_UTILIZATION
        self.utilization_fn = utilization_fn
        self.utilization_definition = utilization_definition or f"{utilization_fn!r} (not described by the caller)"
        self.scope = scope
        self.sampling_period_s = period_s
        self._poller = PowerPoller(self._modelled_watts, period_s)

    def _modelled_watts(self) -> float:
        utilization = min(1.0, max(0.0, self.utilization_fn()))
        return self.idle_w + (self.tdp_w - self.idle_w) * utilization

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "model": "P = idle_w + (tdp_w - idle_w) x utilization, integrated over the window",
            "tdp_w": self.tdp_w,
            "tdp_source": self.tdp_source,
            "idle_w": self.idle_w,
            "idle_source": self.idle_source,
            "utilization": self.utilization_definition,
            "notes": "not a measurement: TDP is a thermal design limit, not a power reading",
        }
