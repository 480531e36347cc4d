"""Energy meters, one file each (NVML, Jetson INA3221, tegrastats, RAPL, an external wall meter's log, a labelled
estimate), registered in ``select.py:METER_CLASSES``."""

from vlabench.telemetry.energy.base import EnergyMeter, EnergyReading, PowerPoller, integrate_power
from vlabench.telemetry.energy.estimated import EstimatedMeter, ProcessCpuUtilization
from vlabench.telemetry.energy.external import ExternalCsvMeter, read_power_log
from vlabench.telemetry.energy.jetson_ina import JetsonInaMeter, discover_ina3221_rails, select_total_rails
from vlabench.telemetry.energy.nvml import (
    NvmlCounterUnsupportedError,
    NvmlEnergyCounterMeter,
    NvmlPowerPollingMeter,
    decode_clock_event_reasons,
    nvml_device_state,
    nvml_meter,
)
from vlabench.telemetry.energy.rapl import RaplMeter, discover_rapl_zones
from vlabench.telemetry.energy.tegrastats import TegrastatsMeter, TegrastatsSample, parse_tegrastats_line

__all__ = [
    "EnergyMeter",
    "EnergyReading",
    "EstimatedMeter",
    "ExternalCsvMeter",
    "JetsonInaMeter",
    "NvmlCounterUnsupportedError",
    "NvmlEnergyCounterMeter",
    "NvmlPowerPollingMeter",
    "PowerPoller",
    "ProcessCpuUtilization",
    "RaplMeter",
    "TegrastatsMeter",
    "TegrastatsSample",
    "decode_clock_event_reasons",
    "discover_ina3221_rails",
    "discover_rapl_zones",
    "integrate_power",
    "nvml_device_state",
    "nvml_meter",
    "parse_tegrastats_line",
    "read_power_log",
    "select_total_rails",
]
