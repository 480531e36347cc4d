"""Thermal, clock and throttle sensors, read on a background thread through a run's timed pass.

Sources, each read where the host has it (kernel ABI: Documentation/ABI/testing/sysfs-class-thermal, sysfs-class-hwmon,
sysfs-devices-system-cpu, sysfs-class-devfreq):

- thermal zones ``/sys/class/thermal/thermal_zone*/{type,temp}`` (m°C; Jetson's CPU-therm, GPU-therm, tj-therm; x86's
  x86_pkg_temp);
- hwmon temperatures ``/sys/class/hwmon/hwmon*/{name,temp*_input,temp*_label}`` (m°C; coretemp, k10temp);
- cpufreq ``/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq`` (kHz), reported as the cores' mean and minimum;
  without cpufreq (most VMs), psutil's reading of /proc/cpuinfo;
- devfreq ``/sys/class/devfreq/*/cur_freq`` (Hz; a Jetson's GPU, e.g. ``17000000.ga10b``);
- x86 thermal-throttle counters ``/sys/devices/system/cpu/cpu*/thermal_throttle/{core,package}_throttle_count``,
  summed over CPUs (they count events since boot: a run throttled when they grew);
- NVML on CUDA: GPU temperature, SM clock and the clock-event (throttle) reasons.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, ClassVar

import psutil

from vlabench.telemetry.counters import Clock, PollingCounter, Series

Reading = dict[str, dict[str, float]]
"""Series (``temperature_c``, ``clock_mhz``, ``throttle_events``) → sensor → value."""

SERIES_UNITS = {"temperature_c": "°C", "clock_mhz": "MHz", "throttle_events": "events since boot"}


def _number(path: Path) -> float | None:
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def thermal_zones(root: Path) -> dict[str, float]:
    """Zone type → °C; a type shared by several zones gets the zone's number appended."""
    found: dict[str, float] = {}
    for zone in sorted(root.glob("sys/class/thermal/thermal_zone*")):
        name, millidegrees = _text(zone / "type"), _number(zone / "temp")
        if name is None or millidegrees is None:
            continue
        key = name if name not in found else f"{name}.{zone.name.removeprefix('thermal_zone')}"
        found[key] = millidegrees / 1000
    return found


def hwmon_temperatures(root: Path) -> dict[str, float]:
    """``chip/label`` (or ``chip/tempN``) → °C for every hwmon temperature input."""
    found: dict[str, float] = {}
    for chip in sorted(root.glob("sys/class/hwmon/hwmon*")):
        name = _text(chip / "name") or chip.name
        for sensor in sorted(chip.glob("temp*_input")):
            millidegrees = _number(sensor)
            if millidegrees is None:
                continue
            label = _text(sensor.with_name(sensor.name.replace("_input", "_label"))) or sensor.name.split("_")[0]
            found[f"{name}/{label}"] = millidegrees / 1000
    return found


def cpu_clocks(root: Path) -> dict[str, float]:
    """The cores' mean and slowest current clock in MHz (cpufreq), else psutil's current clock."""
    khz = [
        value
        for path in sorted(root.glob("sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"))
        if (value := _number(path)) is not None
    ]
    if khz:
        return {"cpu mean": statistics.fmean(khz) / 1000, "cpu min": min(khz) / 1000}
    if root != Path("/"):
        return {}
    frequency = psutil.cpu_freq()
    return {"cpu mean": frequency.current} if frequency and frequency.current else {}


def devfreq_clocks(root: Path) -> dict[str, float]:
    """devfreq device → MHz (Jetson GPUs and memory controllers)."""
    return {
        device.name: hz / 1e6
        for device in sorted(root.glob("sys/class/devfreq/*"))
        if (hz := _number(device / "cur_freq")) is not None
    }


def throttle_counts(root: Path) -> dict[str, float]:
    """x86 thermal-throttle events since boot, summed over CPUs, by kind (core, package)."""
    counts: dict[str, float] = {}
    for kind in ("core", "package"):
        values = [
            value
            for path in sorted(root.glob(f"sys/devices/system/cpu/cpu[0-9]*/thermal_throttle/{kind}_throttle_count"))
            if (value := _number(path)) is not None
        ]
        if values:
            counts[kind] = sum(values)
    return counts


SLOWDOWN_REASONS = frozenset(
    {"SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"}
)
"""NVML clock-event reasons that hold the clocks down (idle, application clocks, sync boost do not)."""


def nvml_reading(index: int) -> Reading:
    """GPU temperature, SM clock and how many slowdown reasons (:data:`SLOWDOWN_REASONS`) are set now."""
    from vlabench.telemetry.energy.nvml import nvml_device_state

    state = nvml_device_state(index)
    reading: Reading = {"temperature_c": {}, "clock_mhz": {}, "throttle_events": {}}
    if state.get("temperature_c") is not None:
        reading["temperature_c"]["gpu"] = float(state["temperature_c"])
    if state.get("sm_clock_mhz") is not None:
        reading["clock_mhz"]["gpu sm"] = float(state["sm_clock_mhz"])
    reasons = [reason for reason in state.get("clock_event_reasons") or [] if reason in SLOWDOWN_REASONS]
    reading["throttle_events"]["gpu slowdown reasons"] = float(len(reasons))
    return reading


def read_sensors(root: Path = Path("/"), nvml_index: int | None = None) -> Reading:
    """Every sensor this host exposes under ``root`` (and NVML's GPU ``nvml_index``), one reading."""
    reading: Reading = {
        "temperature_c": {**thermal_zones(root), **hwmon_temperatures(root)},
        "clock_mhz": {**cpu_clocks(root), **devfreq_clocks(root)},
        "throttle_events": throttle_counts(root),
    }
    if nvml_index is not None:
        try:
            for series, values in nvml_reading(nvml_index).items():
                reading[series].update(values)
        except Exception:  # an NVML error (no permission, MIG) leaves the sysfs sensors
            pass
    return reading


class SensorCounter(PollingCounter):
    """``read_sensors`` every period, plus one reading at start and one at stop."""

    source = "sensors"
    units: ClassVar[dict[str, str]] = SERIES_UNITS

    def __init__(
        self,
        period_s: float = 1.0,
        root: Path = Path("/"),
        nvml_index: int | None = None,
        clock: Clock = time.perf_counter_ns,
    ) -> None:
        super().__init__(period_s, clock)
        self.root, self.nvml_index = root, nvml_index

    def read(self) -> Reading:
        return read_sensors(self.root, self.nvml_index)

    def start(self) -> None:
        super().start()
        self._record(self.read(), self.clock())

    def stop(self) -> list[Series]:
        series = super().stop()
        self._record(self.read(), self.clock())
        return series

    def _record(self, reading: Reading, at_ns: int) -> None:
        for name, keyed in reading.items():
            for key, value in keyed.items():
                self._series[name].add(key, at_ns, at_ns, value)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "nvml_gpu": self.nvml_index}
