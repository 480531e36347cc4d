"""NVML GPM (GPU Performance Monitoring; Hopper and later): SM activity, SM occupancy, tensor-pipe activity and DRAM
bandwidth utilization per phase, through nvidia-ml-py (``pynvml``).

**Method: phase-isolated windows, aggregated over repeated phases.** GPM computes a metric between two samples
(``nvmlGpmSampleGet`` twice, then ``nvmlGpmMetricsGet``), and NVML documents that the two should be more than 100 ms
apart because the GPU refreshes the counters behind a sample at that rate (``GPM_REFRESH_S``). A vision pass, a
prefill or a denoising step lasts milliseconds, so no sampling period resolves a phase inside one inference. Instead
the GPM pass runs each phase on its own, back to back, every call synchronized as the trace pass synchronizes each
span: first for a lead-in of one refresh period plus margin (``LEAD_IN_S``), so the counters behind the first sample
already see only this phase, then for ``windows`` windows of ``window_s`` (default 0.25 s, 2.5 refresh periods),
with a GPM sample at each window edge. Every window holds one phase's work only (tens to hundreds of repetitions), so
its metrics are that phase's; the per-phase figure is the time-weighted mean over its windows, the peak the highest
window. What this does not see: the host gaps between phases of one inference (each phase is repeated after itself),
and cache state left by the previous phase.

Devices without GPM (pre-Hopper, MIG instances, an nvidia-ml-py without the API, counters held by another profiler)
yield a reason instead of numbers (``gpm_unavailable_reason``); the profile records it and falls back to the SM
activity derived from kernel records (``analysis/sm_coverage.py``). Nothing here raises for an unsupported device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

from vlabench.telemetry.counters import Clock, Series
from vlabench.telemetry.energy.nvml import _handle, _init_nvml

GPM_REFRESH_S = 0.1
"""NVML (nvmlGpmMetricsGet): two samples should be more than 100 ms apart: the GPU's internal sample refresh rate."""
LEAD_IN_S = 0.15
WINDOW_S = 0.25
WINDOWS = 3
NVML_SUCCESS = 0

GPM_METRICS: dict[str, str] = {
    "gpm sm activity": "NVML_GPM_METRIC_SM_UTIL",  # share of SMs busy (time- and SM-averaged)
    "gpm sm occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",  # resident warps / the SMs' maximum
    "gpm tensor activity": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",  # SM cycles with any tensor-pipe instruction
    "gpm dram bandwidth": "NVML_GPM_METRIC_DRAM_BW_UTIL",  # DRAM bandwidth used / theoretical maximum
}
"""Series name -> the pynvml metric-id constant; every value is a percentage (0 - 100)."""
GPM_API = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMetricsGet")


def gpm_unavailable_reason(nvml: Any, handle: Any) -> str | None:
    """Why GPM cannot be sampled on this device, or None when it can. Never raises."""
    missing = [name for name in (*GPM_API, "c_nvmlGpmMetricsGet_t", *GPM_METRICS.values()) if not hasattr(nvml, name)]
    if missing:
        return f"the installed nvidia-ml-py lacks the GPM API ({', '.join(missing)})"
    try:
        support = nvml.nvmlGpmQueryDeviceSupport(handle)
    except Exception as error:  # NVMLError_NotSupported, _NoPermission, a driver without the call
        return f"nvmlGpmQueryDeviceSupport failed: {error}"
    if not getattr(support, "isSupportedDevice", 0):
        return "NVML reports no GPM support on this GPU (GPM needs Hopper or later)"
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # not a MIG-capable GPU
        current = 0
    if current:
        return "MIG mode is enabled: device-level GPM samples are unavailable (per-instance samples are not taken)"
    return None


class GpmReader:
    """Two sample buffers used in turn: each ``sample()`` takes one and returns the metrics since the previous one."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.ids = {name: getattr(nvml, constant) for name, constant in GPM_METRICS.items()}
        self._buffers = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        self._previous: Any = None
        self._spare: Any = self._buffers[0]

    def sample(self) -> dict[str, float] | None:
        """Take a sample; {series: percent} over [previous sample, now] (None for the first one). Metrics NVML
        answers with an error code are left out."""
        self.nvml.nvmlGpmSampleGet(self.handle, self._spare)
        if self._previous is None:
            self._previous, self._spare = self._spare, self._buffers[1]
            return None
        values = self._metrics(self._previous, self._spare)
        self._previous, self._spare = self._spare, self._previous
        return values

    def _metrics(self, first: Any, second: Any) -> dict[str, float]:
        request = self.nvml.c_nvmlGpmMetricsGet_t()
        request.version = self.nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.ids)
        request.sample1, request.sample2 = first, second
        for index, metric_id in enumerate(self.ids.values()):
            request.metrics[index].metricId = metric_id
        self.nvml.nvmlGpmMetricsGet(request)
        values: dict[str, float] = {}
        for index, name in enumerate(self.ids):
            metric = request.metrics[index]
            if metric.nvmlReturn == NVML_SUCCESS:
                values[name] = float(metric.value)
        return values

    def close(self) -> None:
        for buffer in self._buffers:
            with contextlib.suppress(Exception):  # best effort: NVML is shut down by the caller anyway
                self.nvml.nvmlGpmSampleFree(buffer)


@dataclass
class GpmWindows:
    """What the GPM pass measured: one window per (phase, start, end), and the metric series on the same clock."""

    events: list[tuple[str, int, int]] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    repetitions: dict[str, int] = field(default_factory=dict)


def measure_isolated(
    reader: GpmReader,
    workloads: Mapping[str, Callable[[], None]],
    window_s: float = WINDOW_S,
    windows: int = WINDOWS,
    lead_in_s: float = LEAD_IN_S,
    clock: Clock = perf_counter_ns,
) -> GpmWindows:
    """Each workload (one synchronized call of one phase) repeated on its own: a lead-in, then ``windows`` windows
    of at least ``window_s`` with a GPM sample at every edge. Series keys are ``gpm`` (one value per window)."""
    result = GpmWindows(series=[Series(name, "%", headline="gpm") for name in GPM_METRICS])
    by_name = {s.name: s for s in result.series}
    for phase, run in workloads.items():
        _repeat(run, lead_in_s, clock)
        reader.sample()  # the metrics since the previous phase's last window mix two phases: dropped
        start = clock()
        for _ in range(windows):
            result.repetitions[phase] = result.repetitions.get(phase, 0) + _repeat(run, window_s, clock)
            end = clock()
            values = reader.sample() or {}
            for name, value in values.items():
                by_name[name].add("gpm", start, end, value)
            result.events.append((phase, start, end))
            start = end
    return result


def _repeat(run: Callable[[], None], duration_s: float, clock: Clock) -> int:
    """Call ``run`` until ``duration_s`` has passed (at least once); the number of calls."""
    began, calls = clock(), 0
    while calls == 0 or (clock() - began) / 1e9 < duration_s:
        run()
        calls += 1
    return calls


def run_gpm_pass(
    workloads: Mapping[str, Callable[[], None]],
    index: int,
    window_s: float = WINDOW_S,
    windows: int = WINDOWS,
    nvml: Any = None,
    clock: Clock = perf_counter_ns,
) -> tuple[GpmWindows | None, str | None]:
    """The GPM pass on torch's ``cuda:index`` (``nvml``: a pynvml-like module, already initialised; default: pynvml,
    initialised and shut down here): (windows, None), or (None, the reason) where GPM is unavailable or NVML fails.
    Errors of the workloads themselves propagate."""
    opened = nvml is None
    try:
        if opened:
            nvml = _init_nvml()
        handle = _handle(nvml, index)
    except Exception as error:  # UnavailableError (no driver, no bindings), NVMLError
        return None, f"NVML unavailable: {error}"
    nvml_error = getattr(nvml, "NVMLError", ())
    try:
        reason = gpm_unavailable_reason(nvml, handle)
        if reason is not None:
            return None, reason
        reader = GpmReader(nvml, handle)
        try:
            return measure_isolated(reader, workloads, window_s, windows, clock=clock), None
        finally:
            reader.close()
    except nvml_error as error:
        return None, f"GPM sampling failed: {error}"
    finally:
        if opened:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()


def describe_gpm(reason: str | None, window_s: float = WINDOW_S, windows: int = WINDOWS) -> dict[str, Any]:
    """The GPM pass as the profile records it: the method, the sampling period, the metrics, or why it did not run."""
    return {
        "source": "nvml gpm",
        "available": reason is None,
        "reason": reason,
        "method": "phase-isolated windows: each phase repeated back to back, GPM sampled at window edges",
        "window_s": window_s,
        "windows_per_phase": windows,
        "lead_in_s": LEAD_IN_S,
        "min_sample_interval_s": GPM_REFRESH_S,
        "metrics": dict(GPM_METRICS),
    }
