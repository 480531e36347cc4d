"""Pick the best energy meter for the device a run uses, or the one the user asked for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vlabench.errors import InputError, UnavailableError, unknown_name
from vlabench.hardware.detection import HostInfo
from vlabench.hardware.devices import DeviceProfile
from vlabench.telemetry.energy.base import EnergyMeter
from vlabench.telemetry.energy.estimated import EstimatedMeter
from vlabench.telemetry.energy.external import ExternalCsvMeter
from vlabench.telemetry.energy.jetson_ina import JetsonInaMeter
from vlabench.telemetry.energy.nvml import NvmlEnergyCounterMeter, NvmlPowerPollingMeter
from vlabench.telemetry.energy.rapl import RaplMeter
from vlabench.telemetry.energy.tegrastats import TegrastatsMeter

METER_CLASSES: list[type[EnergyMeter]] = [
    NvmlEnergyCounterMeter,
    NvmlPowerPollingMeter,
    JetsonInaMeter,
    TegrastatsMeter,
    RaplMeter,
    ExternalCsvMeter,
    EstimatedMeter,
]
"""Every energy meter, one registration each; the names, choices and labels below are read from it."""


def meters() -> dict[str, type[EnergyMeter]]:
    """The meters ``--energy-meter`` opens by their sensor's name (one class per sensor opens it)."""
    return {meter.sensor: meter for meter in METER_CLASSES if meter.sensor and meter.by_name}


def sensor_names() -> set[str]:
    """The sensors a device profile may list: those some meter reads."""
    return {meter.sensor for meter in METER_CLASSES if meter.sensor}


def meter_choices() -> tuple[str, ...]:
    """What ``--energy-meter`` takes."""
    return ("auto", *meters(), "estimated", "none")


def label_of_method(method: str) -> str | None:
    """The label a meter's method gives its energy (measured by a sensor, or estimated): a result is read against
    it (None for a method no registered meter has)."""
    return next((meter.label for meter in METER_CLASSES if meter.method == method), None)


ASSUMED_WATTS_PER_CORE = 6.0
ASSUMED_IDLE_SHARE = 0.3


@dataclass(frozen=True)
class EstimateInputs:
    tdp_w: float
    tdp_source: str
    idle_w: float
    idle_source: str


@dataclass
class MeterChoice:
    meter: EnergyMeter | None
    notes: list[str]


def estimate_inputs(
    profile: DeviceProfile, host: HostInfo, tdp_w: float | None, idle_w: float | None
) -> EstimateInputs:
    """TDP and idle power for estimated energy: the user's values, else the profile's, else stated assumptions."""
    if tdp_w is not None:
        tdp, tdp_source = tdp_w, "--tdp-w"
    elif profile.tdp_w is not None:
        tdp, tdp_source = profile.tdp_w.value, f"profile {profile.name}: {profile.tdp_w.source}"
    else:
        tdp = host.physical_cores * ASSUMED_WATTS_PER_CORE
        tdp_source = f"assumption: {host.physical_cores} cores × {ASSUMED_WATTS_PER_CORE:g} W per core"
    if idle_w is not None:
        idle, idle_source = idle_w, "--idle-w"
    elif profile.idle_w is not None and tdp_w is None:
        idle, idle_source = profile.idle_w.value, f"profile {profile.name}: {profile.idle_w.source}"
    else:
        idle, idle_source = tdp * ASSUMED_IDLE_SHARE, f"assumption: {ASSUMED_IDLE_SHARE:.0%} of TDP"
    return EstimateInputs(tdp, tdp_source, min(idle, tdp), idle_source)


def auto_order(profile: DeviceProfile) -> list[str]:
    """Measured sensors the profile lists, in the order they appear, else what its device type usually has."""
    by_name = meters()
    listed = [name for name in profile.sensors if name in by_name]
    if listed:
        return listed
    return {"cuda": ["nvml"], "cpu": ["rapl"]}.get(profile.torch_device, [])


def choose_meter(
    requested: str,
    profile: DeviceProfile,
    host: HostInfo,
    energy_log: Path | None = None,
    tdp_w: float | None = None,
    idle_w: float | None = None,
) -> MeterChoice:
    choices = meter_choices()
    if requested not in choices:
        raise unknown_name("energy meter", requested, choices)
    if energy_log is not None:
        if requested != "auto":
            raise InputError("--energy-log is an external meter's log; do not combine it with --energy-meter")
        external = ExternalCsvMeter(energy_log)
        external.check()
        return MeterChoice(external, [f"external power log {energy_log}"])
    if requested == "none":
        return MeterChoice(None, ["energy not measured (--energy-meter none)"])
    by_name = meters()
    if requested in by_name:
        return MeterChoice(by_name[requested].open(), [])
    notes = [f"{name}: no energy meter reads this sensor" for name in profile.sensors if name not in sensor_names()]
    if requested == "auto":
        for name in auto_order(profile):
            try:
                return MeterChoice(by_name[name].open(), [])
            except UnavailableError as exc:
                notes.append(f"{name} unavailable: {exc}")
    inputs = estimate_inputs(profile, host, tdp_w, idle_w)
    meter = EstimatedMeter(inputs.tdp_w, inputs.idle_w, tdp_source=inputs.tdp_source, idle_source=inputs.idle_source)
    notes.append("energy is estimated from TDP and utilization, not measured")
    return MeterChoice(meter, notes)
