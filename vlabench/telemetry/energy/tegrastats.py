"""The tegrastats meter: runs Jetson's ``tegrastats`` and integrates the module total from its power rails (which
rail is the total: ``jetson_ina.select_total_rails``); its lines also carry CPU, GPU and memory figures
(``parse_tegrastats_line``, read by the utilization counters)."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from vlabench.errors import InputError, UnavailableError
from vlabench.telemetry.energy.base import EnergyMeter, EnergyReading, integrate_power
from vlabench.telemetry.energy.jetson_ina import select_total_rails


@dataclass(frozen=True)
class CpuCore:
    load_pct: int | None  # None when the core is off
    freq_mhz: int | None


@dataclass(frozen=True)
class TegrastatsSample:
    """One tegrastats line. Power rails map to (current_mW, tegrastats' running average_mW)."""

    timestamp: datetime | None
    ram_used_mb: int
    ram_total_mb: int
    swap_used_mb: int | None
    swap_total_mb: int | None
    cpus: tuple[CpuCore, ...]
    gr3d_load_pct: int | None
    gr3d_freq_mhz: int | None  # the highest GPC clock when tegrastats lists one per GPC
    emc_load_pct: int | None
    emc_freq_mhz: int | None
    temperatures_c: dict[str, float]  # -256 means the sensor is off
    rails_mw: dict[str, tuple[int, int]]


_TIMESTAMP = re.compile(r"^(\d{2}-\d{2}-\d{4} \d{2}:\d{2}:\d{2}) ")
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_CORE = re.compile(r"(\d+)%(?:@(\d+))?")
_GR3D = re.compile(r"\bGR3D_FREQ (?:(\d+)%)?(?:@(\d+|\[[\d,]*\]))?")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
_TEMP = re.compile(r"\b(\w+)@(-?\d+(?:\.\d+)?)C\b")
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?(?!\w)")


def _optional_int(text: str | None) -> int | None:
    return None if text is None else int(text)


def _parse_core(text: str) -> CpuCore:
    if text == "off":
        return CpuCore(None, None)
    match = _CORE.fullmatch(text)
    if match is None:
        raise InputError(f"unrecognised tegrastats CPU entry '{text}'")
    return CpuCore(int(match.group(1)), _optional_int(match.group(2)))


def _gr3d_freq(text: str | None) -> int | None:
    if text is None:
        return None
    clocks = [int(c) for c in text.strip("[]").split(",") if c]
    return max(clocks) if clocks else None


def parse_tegrastats_line(line: str) -> TegrastatsSample:
    """Parse one tegrastats output line (JetPack 4 to 6 formats: with or without mW units and timestamp)."""
    ram = _RAM.search(line)
    if ram is None:
        raise InputError(f"not a tegrastats line (no RAM field): {line.strip()!r}")
    stamp, swap, cpu = _TIMESTAMP.match(line), _SWAP.search(line), _CPU.search(line)
    gr3d, emc = _GR3D.search(line), _EMC.search(line)
    return TegrastatsSample(
        timestamp=datetime.strptime(stamp.group(1), "%m-%d-%Y %H:%M:%S") if stamp else None,
        ram_used_mb=int(ram.group(1)),
        ram_total_mb=int(ram.group(2)),
        swap_used_mb=int(swap.group(1)) if swap else None,
        swap_total_mb=int(swap.group(2)) if swap else None,
        cpus=tuple(_parse_core(c.strip()) for c in cpu.group(1).split(",")) if cpu else (),
        gr3d_load_pct=_optional_int(gr3d.group(1)) if gr3d else None,
        gr3d_freq_mhz=_gr3d_freq(gr3d.group(2)) if gr3d else None,
        emc_load_pct=int(emc.group(1)) if emc else None,
        emc_freq_mhz=_optional_int(emc.group(2)) if emc else None,
        temperatures_c={name: float(value) for name, value in _TEMP.findall(line)},
        rails_mw={name: (int(now), int(avg)) for name, now, avg in _RAIL.findall(line)},
    )


def _tegrastats_lines(stream: IO[str], clock: Callable[[], float]) -> Iterator[tuple[float, str]]:
    for line in stream:
        yield clock(), line


class TegrastatsMeter(EnergyMeter):
    """Runs ``tegrastats --interval N`` and integrates the module total from its lines (timestamped on arrival).

    ``lines`` replaces the subprocess with any iterable of (clock time, line), e.g. a recorded log.
    """

    sensor = "tegrastats"
    method = "tegrastats"
    label = "measured"
    scope = "module"

    def __init__(
        self,
        interval_ms: int = 100,
        lines: Iterable[tuple[float, str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_ms = interval_ms
        self.sampling_period_s = interval_ms / 1e3
        self.clock = clock
        self._process: subprocess.Popen[str] | None = None
        if lines is None:
            binary = shutil.which("tegrastats")
            if binary is None:
                raise UnavailableError(
                    "tegrastats not found on PATH; it ships with JetPack (/usr/bin/tegrastats) on Jetson only; "
                    "try --energy-meter jetson-ina3221"
                )
            self._process = subprocess.Popen(
                [binary, "--interval", str(interval_ms)], stdout=subprocess.PIPE, text=True, bufsize=1
            )
            assert self._process.stdout is not None
            lines = _tegrastats_lines(self._process.stdout, clock)
        self.rails: tuple[str, ...] = ()
        self._samples: list[tuple[float, float]] = []
        self._ended = False
        self._changed = threading.Condition()
        self._t0: float | None = None
        self._reader = threading.Thread(target=self._consume, args=(lines,), name="vlabench-tegrastats", daemon=True)
        self._reader.start()

    def _consume(self, lines: Iterable[tuple[float, str]]) -> None:
        for t, line in lines:
            try:
                rails_mw = parse_tegrastats_line(line).rails_mw
            except InputError:
                continue  # tegrastats' own warnings, blank lines
            if not rails_mw:
                continue
            if not self.rails:
                self.rails, self.scope = select_total_rails(rails_mw)
            with self._changed:
                self._samples.append((t, sum(rails_mw.get(n, (0, 0))[0] for n in self.rails) / 1e3))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def start(self) -> None:
        self._t0 = self.clock()
        with self._changed:
            earlier = [s for s in self._samples if s[0] <= self._t0]
            self._samples = [*earlier[-1:], *(s for s in self._samples if s[0] > self._t0)]

    def stop(self) -> EnergyReading:
        """Waits up to three intervals for the first line after the window so that its end is bracketed."""
        if self._t0 is None:
            raise RuntimeError("TegrastatsMeter.stop() called without start()")
        t0, t1 = self._t0, self.clock()
        self._t0 = None
        with self._changed:
            self._changed.wait_for(
                lambda: self._ended or (bool(self._samples) and self._samples[-1][0] >= t1),
                timeout=3 * self.sampling_period_s + 1.0,
            )
            samples = list(self._samples)
        if not samples:
            raise UnavailableError("tegrastats printed no power rails during the window; is this a Jetson?")
        used = sum(1 for t, _ in samples if t0 <= t <= t1)
        return EnergyReading(joules=integrate_power(samples, t0, t1), duration_s=t1 - t0, samples=used)

    def close(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()
            self._process = None
        self._reader.join(timeout=1.0)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "rails": list(self.rails),
            "command": f"tegrastats --interval {self.interval_ms}",
            "notes": "uses each line's current rail power, not tegrastats' running average; lines are timestamped "
            "when read, so pipe latency shifts the window by up to one interval",
        }
