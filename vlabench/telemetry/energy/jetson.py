"""Jetson power: INA3221 rails read from sysfs, and tegrastats lines.

INA3221 layouts:

- JetPack 5/6 (L4T 35/36, Orin), hwmon: ``/sys/bus/i2c/drivers/ina3221/<bus-addr>/hwmon/hwmon*/`` with ``inN_label``,
  ``inN_input`` (mV) and ``currN_input`` (mA); power = mV x mA / 1e6 W.
- JetPack 4 (L4T 32, Nano/TX2/Xavier), iio: ``/sys/bus/i2c/drivers/ina3221x/<bus-addr>/iio:device*/`` with
  ``rail_name_N`` and ``in_powerN_input`` (mW).

Which rail is the total: the module's input rail when there is one (``INPUT_RAILS``, in priority order): ``VDD_IN``
(Orin NX/Nano, Xavier NX, TX2), ``POM_5V_IN`` (Nano), ``VIN`` (Thor, as reported by tegrastats; not verified on
hardware). AGX Xavier and AGX Orin have no input rail: their monitors sit on the module's separate supplies (GPU, CPU,
SOC, CV, DDR and the 5 V system input ``VIN_SYS_5V0``/``SYS5V``), so their sum is used. ``VIN_SYS_5V0`` alone is only
the 5 V input and is never taken as the total. The sensors sit on the module: carrier-board power is not included.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from vlabench.errors import InputError, UnavailableError
from vlabench.telemetry.energy.base import EnergyMeter, EnergyReading, PollingMeter, PowerPoller, integrate_power

INPUT_RAILS = ("VDD_IN", "POM_5V_IN", "VIN")
UNCONNECTED = "NC"
HWMON_GLOB = "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"
IIO_GLOB = "sys/bus/i2c/drivers/ina3221x/*/iio:device*"


def _read_number(path: Path) -> int:
    return int(path.read_text().split()[0])


@dataclass(frozen=True)
class InaRail:
    """One INA3221 channel: either a power file (mW, JetPack 4) or a voltage (mV) and a current (mA) file."""

    name: str
    power_mw_file: Path | None = None
    voltage_mv_file: Path | None = None
    current_ma_file: Path | None = None

    def watts(self) -> float:
        if self.power_mw_file is not None:
            return _read_number(self.power_mw_file) / 1e3
        assert self.voltage_mv_file is not None and self.current_ma_file is not None
        return _read_number(self.voltage_mv_file) * _read_number(self.current_ma_file) / 1e6

    def files(self) -> list[str]:
        return [str(p) for p in (self.power_mw_file, self.voltage_mv_file, self.current_ma_file) if p is not None]


def discover_ina3221_rails(root: str | Path = "/") -> dict[str, InaRail]:
    """Labelled INA3221 channels under a sysfs root (hwmon layout first, then the JetPack 4 iio one), by rail name."""
    rails: dict[str, InaRail] = {}
    for directory in sorted(Path(root).glob(HWMON_GLOB)):
        for label in sorted(directory.glob("in*_label")):
            channel = label.name[2 : -len("_label")]
            name = label.read_text().strip()
            voltage, current = directory / f"in{channel}_input", directory / f"curr{channel}_input"
            if name != UNCONNECTED and current.is_file() and voltage.is_file():
                rails.setdefault(name, InaRail(name, voltage_mv_file=voltage, current_ma_file=current))
    for directory in sorted(Path(root).glob(IIO_GLOB)):
        for label in sorted(directory.glob("rail_name_*")):
            channel = label.name[len("rail_name_") :]
            name = label.read_text().strip()
            power = directory / f"in_power{channel}_input"
            if name != UNCONNECTED and power.is_file():
                rails.setdefault(name, InaRail(name, power_mw_file=power))
    return rails


def select_total_rails(names: Iterable[str]) -> tuple[tuple[str, ...], str]:
    """The rails whose sum is the module's power, and the scope that sum has (see the module docstring)."""
    available = [n for n in names if n != UNCONNECTED]
    for rail in INPUT_RAILS:
        if rail in available:
            return (rail,), "module"
    return tuple(sorted(available)), "module-rails-sum"


class JetsonInaMeter(PollingMeter):
    """Polls the INA3221 rails that make up the module total and integrates their power."""

    method = "jetson-ina3221"
    label = "measured"

    def __init__(self, root: str | Path = "/", period_s: float = 0.1) -> None:
        self.root = Path(root)
        found = discover_ina3221_rails(self.root)
        if not found:
            raise UnavailableError(
                f"no INA3221 power rails under {self.root / 'sys/bus/i2c/drivers'} (ina3221 hwmon or ina3221x iio); "
                "this is not a Jetson, or /sys is not mounted into the container; try --energy-meter tegrastats"
            )
        names, self.scope = select_total_rails(found)
        self.rails = [found[n] for n in names]
        self.other_rails = sorted(set(found) - set(names))
        self.sampling_period_s = period_s
        try:
            self._read_watts()
        except PermissionError as error:
            raise UnavailableError(f"cannot read the INA3221 rails ({error}); run as root") from error
        self._poller = PowerPoller(self._read_watts, period_s)

    def _read_watts(self) -> float:
        return sum(rail.watts() for rail in self.rails)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "rails": [r.name for r in self.rails],
            "sensor_files": [f for r in self.rails for f in r.files()],
            "other_rails": self.other_rails,
            "notes": "INA3221 on the module; carrier-board power is not included",
        }


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
