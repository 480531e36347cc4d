"""Utilization counters for ``vlabench profile``: read on a background thread, on the spans' clock.

Every sample carries the interval it describes: utilization is an average since the previous read (psutil, NVML,
tegrastats all report it that way), so a sample at t describes [t_previous, t].
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

import torch

from vlabench.errors import InputError, UnavailableError
from vlabench.telemetry.energy.tegrastats import parse_tegrastats_line

Clock = Callable[[], int]


@dataclass(frozen=True)
class Sample:
    start_ns: int
    end_ns: int
    value: float


@dataclass
class Series:
    """One counter track: ``name`` (e.g. ``cpu utilization``) with one value per key (e.g. per core)."""

    name: str
    unit: str
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    headline: str | None = None  # the key the per-phase summary reports (e.g. the mean over cores)

    def add(self, key: str, start_ns: int, end_ns: int, value: float) -> None:
        self.samples.setdefault(key, []).append(Sample(start_ns, end_ns, value))


class UtilizationCounter(ABC):
    """Collects series between start() and stop(); sources describe themselves for the result."""

    source: str
    period_s: float
    units: ClassVar[dict[str, str]]  # series name -> unit
    headlines: ClassVar[dict[str, str]] = {}  # series name -> the key the per-phase summary reports

    def empty_series(self) -> dict[str, Series]:
        return {name: Series(name, unit, headline=self.headlines.get(name)) for name, unit in self.units.items()}

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> list[Series]: ...

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "period_s": self.period_s}


class PollingCounter(UtilizationCounter):
    """Calls ``read()`` every period on a daemon thread; ``read`` returns {series: {key: value}}."""

    def __init__(self, period_s: float, clock: Clock = time.perf_counter_ns) -> None:
        if period_s <= 0:
            raise InputError(f"sampling period must be positive, got {period_s}")
        self.period_s = period_s
        self.clock = clock
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._series: dict[str, Series] = {}
        self._error: BaseException | None = None

    @abstractmethod
    def read(self) -> dict[str, dict[str, float]]: ...

    def start(self) -> None:
        self._series = self.empty_series()
        self._halt.clear()
        self.read()  # primes interval counters such as psutil's
        self._thread = threading.Thread(target=self._run, name=f"vlabench-{self.source}-counter", daemon=True)
        self._thread.start()

    def stop(self) -> list[Series]:
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise UnavailableError(f"{self.source} sampling failed: {self._error}")
        return list(self._series.values())

    def _run(self) -> None:
        previous = self.clock()
        while not self._halt.wait(self.period_s):
            try:
                values = self.read()
            except Exception as error:  # reported by stop()
                self._error = error
                return
            now = self.clock()
            for name, keyed in values.items():
                for key, value in keyed.items():
                    self._series[name].add(key, previous, now, value)
            previous = now


class CpuCounter(PollingCounter):
    """Per-core utilization (psutil: busy share since the previous read) and per-core frequency."""

    source = "psutil"
    units: ClassVar[dict[str, str]] = {"cpu utilization": "%", "cpu frequency": "MHz"}
    headlines: ClassVar[dict[str, str]] = {"cpu utilization": "mean", "cpu frequency": "mean"}

    def read(self) -> dict[str, dict[str, float]]:
        import psutil

        load = psutil.cpu_percent(percpu=True)
        values = {"cpu utilization": {f"cpu{i}": v for i, v in enumerate(load)}}
        values["cpu utilization"]["mean"] = sum(load) / len(load)
        clocks = psutil.cpu_freq(percpu=True) or []
        if clocks:
            values["cpu frequency"] = {f"cpu{i}": c.current for i, c in enumerate(clocks)}
            values["cpu frequency"]["mean"] = sum(c.current for c in clocks) / len(clocks)
        return values


class NvmlCounter(PollingCounter):
    """NVML utilization (share of time a kernel ran; memory-controller busy share), board power and clocks."""

    source = "nvml"
    units: ClassVar[dict[str, str]] = {
        "gpu utilization": "%",
        "gpu memory utilization": "%",
        "gpu power": "W",
        "gpu clocks": "MHz",
    }
    headlines: ClassVar[dict[str, str]] = {
        "gpu utilization": "gpu",
        "gpu memory utilization": "memory",
        "gpu power": "board",
        "gpu clocks": "sm",
    }

    def __init__(self, index: int = 0, period_s: float = 0.02, clock: Clock = time.perf_counter_ns) -> None:
        from vlabench.telemetry.energy.nvml import _handle, _init_nvml

        super().__init__(period_s, clock)
        self.nvml = _init_nvml()
        self.device = _handle(self.nvml, index)

    def read(self) -> dict[str, dict[str, float]]:
        nvml, device = self.nvml, self.device
        rates = nvml.nvmlDeviceGetUtilizationRates(device)
        return {
            "gpu utilization": {"gpu": float(rates.gpu)},
            "gpu memory utilization": {"memory": float(rates.memory)},
            "gpu power": {"board": nvml.nvmlDeviceGetPowerUsage(device) / 1e3},
            "gpu clocks": {
                "sm": float(nvml.nvmlDeviceGetClockInfo(device, nvml.NVML_CLOCK_SM)),
                "memory": float(nvml.nvmlDeviceGetClockInfo(device, nvml.NVML_CLOCK_MEM)),
            },
        }

    def stop(self) -> list[Series]:
        try:
            return super().stop()
        finally:
            self.nvml.nvmlShutdown()


def tegrastats_values(line: str) -> dict[str, dict[str, float]]:
    """GR3D (GPU) and EMC (memory controller) load, per-core CPU load and rail power (W) from one line."""
    sample = parse_tegrastats_line(line)
    values: dict[str, dict[str, float]] = {}
    if sample.gr3d_load_pct is not None:
        values["gpu utilization"] = {"gr3d": float(sample.gr3d_load_pct)}
    if sample.emc_load_pct is not None:
        values["gpu memory utilization"] = {"emc": float(sample.emc_load_pct)}
    cores = {f"cpu{i}": float(c.load_pct) for i, c in enumerate(sample.cpus) if c.load_pct is not None}
    if cores:
        values["cpu utilization"] = {**cores, "mean": sum(cores.values()) / len(cores)}
    if sample.rails_mw:
        values["rail power"] = {name: now / 1e3 for name, (now, _) in sample.rails_mw.items()}
    return values


class TegrastatsCounter(UtilizationCounter):
    """Runs ``tegrastats --interval N``; each line describes the interval since the previous one.

    ``lines`` replaces the subprocess with any iterable of (clock ns, line), e.g. a recorded log.
    """

    source = "tegrastats"
    units: ClassVar[dict[str, str]] = {
        "gpu utilization": "%",
        "gpu memory utilization": "%",
        "cpu utilization": "%",
        "rail power": "W",
    }
    headlines: ClassVar[dict[str, str]] = {
        "gpu utilization": "gr3d",
        "gpu memory utilization": "emc",
        "cpu utilization": "mean",
    }

    def __init__(self, period_s: float = 0.1, lines: Iterable[tuple[int, str]] | None = None) -> None:
        self.period_s = period_s
        self._lines = lines
        self._process: subprocess.Popen[str] | None = None
        self._series: dict[str, Series] = {}
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        lines = self._lines
        if lines is None:
            binary = shutil.which("tegrastats")
            if binary is None:
                raise UnavailableError("tegrastats not found on PATH; it ships with JetPack on Jetson only")
            interval_ms = str(max(1, round(self.period_s * 1e3)))
            self._process = subprocess.Popen([binary, "--interval", interval_ms], stdout=subprocess.PIPE, text=True)
            lines = _stamped(self._process.stdout)  # type: ignore[arg-type]
        self._series = self.empty_series()
        self._reader = threading.Thread(target=self._consume, args=(lines,), name="vlabench-tegrastats", daemon=True)
        self._reader.start()

    def _consume(self, lines: Iterable[tuple[int, str]]) -> None:
        previous: int | None = None
        for t, line in lines:
            try:
                values = tegrastats_values(line)
            except InputError:
                continue
            start = previous if previous is not None else t - round(self.period_s * 1e9)
            for name, keyed in values.items():
                for key, value in keyed.items():
                    self._series[name].add(key, start, t, value)
            previous = t

    def stop(self) -> list[Series]:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()
            self._process = None
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        return [series for series in self._series.values() if series.samples]


def _stamped(stream: IO[str]) -> Iterable[tuple[int, str]]:
    for line in stream:
        yield time.perf_counter_ns(), line


def counters_for(device: torch.device, jetson: bool, period_s: float | None) -> list[UtilizationCounter]:
    """CPU counters everywhere; NVML on CUDA GPUs; tegrastats on Jetson (whose GPU NVML does not serve)."""
    if jetson:
        return [TegrastatsCounter(period_s or 0.1)]
    chosen: list[UtilizationCounter] = [CpuCounter(period_s or 0.05)]
    if device.type == "cuda":
        chosen.append(NvmlCounter(device.index or 0, period_s or 0.02))
    return chosen
