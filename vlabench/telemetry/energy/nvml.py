"""NVIDIA GPU energy through NVML (``pynvml`` from the ``nvidia-ml-py`` package), and the GPU's clock/power state."""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import torch

from vlabench.errors import InputError, UnavailableError
from vlabench.telemetry.energy.base import EnergyMeter, EnergyReading, PollingMeter, PowerPoller

MIN_POLL_PERIOD_S = 0.05  # faster polling returns zeros or NotSupported (Zeus PR #186)

# Clock event (formerly "throttle") reason bits, named as pynvml's nvmlClocksEventReason* constants; the values are
# nvml.h's and are used when the installed pynvml lacks a constant.
CLOCK_EVENT_REASON_BITS: dict[str, int] = {
    "GpuIdle": 0x1,
    "ApplicationsClocksSetting": 0x2,
    "SwPowerCap": 0x4,
    "HwSlowdown": 0x8,
    "SyncBoost": 0x10,
    "SwThermalSlowdown": 0x20,
    "HwThermalSlowdown": 0x40,
    "HwPowerBrakeSlowdown": 0x80,
    "DisplayClockSetting": 0x100,
}
_REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
_NOT_REASONS = ("None", "All", "UserDefinedClocks")  # a zero, a union and a deprecated alias


class NvmlCounterUnsupportedError(UnavailableError):
    """The GPU has no cumulative energy counter (pre-Volta, Jetson, some vGPUs)."""


def clock_event_reason_bits(pynvml: ModuleType) -> dict[str, int]:
    """Reason name -> bit from the pynvml module's constants, on top of the nvml.h table."""
    bits = dict(CLOCK_EVENT_REASON_BITS)
    for attribute in dir(pynvml):
        for prefix in _REASON_PREFIXES:
            name = attribute.removeprefix(prefix)
            if attribute.startswith(prefix) and name not in _NOT_REASONS:
                bits.setdefault(name, getattr(pynvml, attribute))
    return bits


def decode_clock_event_reasons(mask: int, bits: Mapping[str, int] = CLOCK_EVENT_REASON_BITS) -> list[str]:
    """Names of the reasons set in an NVML clock-event/throttle bitmask, in bit order; unknown bits as hex."""
    names = [name for name, bit in sorted(bits.items(), key=lambda item: item[1]) if mask & bit]
    unknown = mask & ~functools.reduce(operator.or_, bits.values(), 0)
    return [*names, f"Unknown(0x{unknown:x})"] if unknown else names


def _init_nvml() -> ModuleType:
    """Import pynvml and initialise NVML; pair every call with pynvml.nvmlShutdown()."""
    try:
        import pynvml
    except ImportError as error:
        raise UnavailableError(
            "the NVML Python bindings are not installed: `pip install nvidia-ml-py`, or pick another --energy-meter"
        ) from error
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise UnavailableError(
            f"NVML could not initialise ({error}): no NVIDIA GPU or driver on this host (`nvidia-smi` should work), "
            "or `pip install -U nvidia-ml-py` to match the driver; or pick another --energy-meter"
        ) from error
    return pynvml


def _handle(pynvml: ModuleType, index: int) -> Any:
    """NVML handle of torch's ``cuda:index``: NVML numbers GPUs in PCI order and ignores CUDA_VISIBLE_DEVICES, so
    the GPU is matched by UUID when torch can see it; NVML's own index otherwise."""
    if torch.cuda.is_available() and index < torch.cuda.device_count():
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{torch.cuda.get_device_properties(index).uuid}")
        except pynvml.NVMLError:
            pass
    try:
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as error:
        raise UnavailableError(f"no NVIDIA GPU with index {index} ({error}); `nvidia-smi -L` lists them") from error


def _name(pynvml: ModuleType, device: Any) -> str:
    name = pynvml.nvmlDeviceGetName(device)
    return name.decode() if isinstance(name, bytes) else name  # older bindings return bytes


class _NvmlMeter(EnergyMeter):
    sensor = "nvml"
    label = "measured"

    @classmethod
    def open(cls) -> EnergyMeter:
        """GPU 0's energy counter when it has one, else its power polled (``nvml_meter``)."""
        return nvml_meter(0)

    scope = "gpu"

    def __init__(self, index: int) -> None:
        self.index = index
        self._nvml: ModuleType | None = _init_nvml()
        try:
            self._device = _handle(self._nvml, index)
            self.gpu_name = _name(self._nvml, self._device)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "gpu_index": self.index, "gpu_name": self.gpu_name}


class NvmlEnergyCounterMeter(_NvmlMeter):
    """Reads the cumulative board energy counter (mJ, Volta and newer) at start and stop."""

    method = "nvml-energy-counter"
    sampling_period_s = None

    def __init__(self, index: int = 0) -> None:
        super().__init__(index)
        try:
            self._start_mj = self._read_mj()  # raises NvmlCounterUnsupportedError on GPUs without the counter
        except Exception:
            self.close()
            raise
        self._t0 = time.monotonic()

    def _read_mj(self) -> int:
        assert self._nvml is not None, "meter is closed"
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._device))
        except self._nvml.NVMLError_NotSupported as error:
            raise NvmlCounterUnsupportedError(
                f"GPU {self.index} ({self.gpu_name}) has no NVML energy counter (Volta or newer is needed); "
                "use NVML power polling"
            ) from error

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._start_mj = self._read_mj()

    def stop(self) -> EnergyReading:
        end_mj = self._read_mj()
        return EnergyReading(joules=(end_mj - self._start_mj) / 1e3, duration_s=time.monotonic() - self._t0, samples=2)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "api": "nvmlDeviceGetTotalEnergyConsumption (mJ since driver load)",
            "notes": "counter refreshes about every 10 ms; measure windows of 1 s or more",
        }


class NvmlPowerPollingMeter(_NvmlMeter, PollingMeter):
    """Polls the GPU's power draw and integrates it."""

    method = "nvml-power-polling"

    def __init__(self, index: int = 0, period_s: float = 0.1) -> None:
        if period_s < MIN_POLL_PERIOD_S:
            raise InputError(
                f"NVML power polling period {period_s} s is below {MIN_POLL_PERIOD_S} s; faster polling returns "
                "zeros or NotSupported: use a period of at least 0.05 s"
            )
        super().__init__(index)
        self.sampling_period_s = period_s
        self._poller = PowerPoller(self._read_watts, period_s)

    def _read_watts(self) -> float:
        assert self._nvml is not None, "meter is closed"
        return self._nvml.nvmlDeviceGetPowerUsage(self._device) / 1e3

    def close(self) -> None:
        PollingMeter.close(self)
        _NvmlMeter.close(self)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "api": "nvmlDeviceGetPowerUsage (mW)",
            "warning": "on Ampere (GA100) and newer GPUs this is a 1 s moving average, so windows shorter than a few "
            "seconds are smeared; prefer the energy counter when the GPU has one",
        }


def nvml_meter(index: int = 0, period_s: float = 0.1) -> EnergyMeter:
    """The energy counter meter when the GPU supports it, else power polling."""
    try:
        return NvmlEnergyCounterMeter(index)
    except NvmlCounterUnsupportedError:
        return NvmlPowerPollingMeter(index, period_s)


def _supported(pynvml: ModuleType, query: Callable[..., Any], *args: Any) -> Any:
    """The query's value, or None when the GPU does not support it."""
    try:
        return query(*args)
    except pynvml.NVMLError_NotSupported:
        return None


def _clock_event_mask(pynvml: ModuleType, device: Any) -> int | None:
    query = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if query is not None:
        try:
            return _supported(pynvml, query, device)
        except pynvml.NVMLError_FunctionNotFound:
            pass  # driver older than the bindings: fall back to the pre-12.x name
    return _supported(pynvml, pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, device)


def nvml_device_state(index: int = 0) -> dict[str, Any]:
    """Clocks, power limit, temperature and the current clock event (throttle) reasons of one GPU."""
    pynvml = _init_nvml()
    try:
        device = _handle(pynvml, index)
        power_limit_mw = _supported(pynvml, pynvml.nvmlDeviceGetEnforcedPowerLimit, device)
        mask = _clock_event_mask(pynvml, device)
        reasons = None if mask is None else decode_clock_event_reasons(mask, clock_event_reason_bits(pynvml))
        return {
            "name": _name(pynvml, device),
            "sm_clock_mhz": _supported(pynvml, pynvml.nvmlDeviceGetClockInfo, device, pynvml.NVML_CLOCK_SM),
            "memory_clock_mhz": _supported(pynvml, pynvml.nvmlDeviceGetClockInfo, device, pynvml.NVML_CLOCK_MEM),
            "power_limit_w": None if power_limit_mw is None else power_limit_mw / 1e3,
            "temperature_c": _supported(pynvml, pynvml.nvmlDeviceGetTemperature, device, pynvml.NVML_TEMPERATURE_GPU),
            "clock_event_mask": mask,
            "clock_event_reasons": reasons,
        }
    finally:
        pynvml.nvmlShutdown()
