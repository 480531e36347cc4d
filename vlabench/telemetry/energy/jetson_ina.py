"""The Jetson INA3221 meter: the module's power rails read from sysfs (``tegrastats.py`` reads the same rails
through tegrastats).

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

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlabench.errors import UnavailableError
from vlabench.telemetry.energy.base import PollingMeter, PowerPoller

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

    sensor = "jetson-ina3221"
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
