"""CPU package (and DRAM) energy from RAPL counters exposed by the Linux powercap framework.

Intel CPUs, and AMD Zen CPUs on kernels whose ``intel_rapl_msr`` driver supports them, expose the same zone names:
``intel-rapl:N`` is package N (``name`` = ``package-N``; ``psys`` on some laptops covers the whole platform and is not
summed), ``intel-rapl:N:M`` are its subzones (``core`` and ``uncore`` lie inside the package, ``dram`` is counted on its
own; AMD Zen has no DRAM zone). ``intel-rapl-mmio:*`` duplicates a package counter and the ``amd_energy`` hwmon driver
is a different interface; neither is read. Counters are cumulative microjoules that wrap at ``max_energy_range_uj``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlabench.errors import UnavailableError
from vlabench.telemetry.energy.base import EnergyMeter, EnergyReading

POWERCAP = Path("sys/class/powercap")
COUNTED_SUBZONES = ("dram",)


def _permission_message(path: Path) -> str:
    return (
        f"cannot read {path}: energy_uj is root-only since Linux 5.10 and its stable backports (CVE-2020-8694); "
        "run as root, or `sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj` (until reboot), "
        "or use --energy-meter estimated"
    )


def read_energy_uj(path: Path) -> int:
    """One counter read; a permission error becomes an UnavailableError that says how to grant access."""
    try:
        return int(path.read_text().strip())
    except PermissionError as error:
        raise UnavailableError(_permission_message(path)) from error


@dataclass(frozen=True)
class RaplZone:
    name: str  # "package-0", "dram", "core", "uncore", "psys"
    path: Path
    max_energy_range_uj: int

    def read_uj(self) -> int:
        return read_energy_uj(self.path / "energy_uj")


def counter_delta(start_uj: int, end_uj: int, max_energy_range_uj: int) -> int:
    """Microjoules between two reads of a counter that wraps to 0 after max_energy_range_uj (at most one wrap)."""
    return end_uj - start_uj if end_uj >= start_uj else end_uj + max_energy_range_uj + 1 - start_uj


def discover_rapl_zones(root: str | Path = "/") -> list[RaplZone]:
    """Every ``intel-rapl:*`` zone under ``<root>/sys/class/powercap``, packages and subzones alike, sorted by path."""
    zones = []
    for path in sorted((Path(root) / POWERCAP).glob("intel-rapl:*")):
        name_file, range_file = path / "name", path / "max_energy_range_uj"
        if name_file.is_file() and range_file.is_file():
            zones.append(RaplZone(name_file.read_text().strip(), path, int(range_file.read_text().strip())))
    return zones


class RaplMeter(EnergyMeter):
    """Sums the package zones (and DRAM zones when present) between start() and stop().

    While a window is open a background thread reads the counters every ``wrap_check_s`` so that a long window cannot
    hide more than one wrap-around of a counter between two reads.
    """

    sensor = "rapl"
    method = "rapl"
    label = "measured"
    sampling_period_s = None

    def __init__(self, root: str | Path = "/", wrap_check_s: float = 5.0) -> None:
        self.root = Path(root)
        self.wrap_check_s = wrap_check_s
        found = discover_rapl_zones(self.root)
        self.zones = [z for z in found if z.name.startswith("package-") or z.name in COUNTED_SUBZONES]
        if not any(z.name.startswith("package-") for z in self.zones):
            raise UnavailableError(
                f"no RAPL powercap zones under {self.root / POWERCAP} (needs an Intel or AMD Zen CPU on Linux with the "
                "intel_rapl_msr module loaded, and /sys/class/powercap visible inside containers); "
                "use --energy-meter estimated"
            )
        self.scope = "package+dram" if any(z.name in COUNTED_SUBZONES for z in self.zones) else "package"
        self._last = [z.read_uj() for z in self.zones]  # fails here, not mid-run, when energy_uj is unreadable
        self._total_uj = 0
        self._reads = 0
        self._t0 = 0.0
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.close()
        self._halt.clear()
        self._t0 = time.monotonic()
        self._last = [z.read_uj() for z in self.zones]
        self._total_uj, self._reads = 0, 1
        self._thread = threading.Thread(target=self._guard, name="vlabench-rapl-wrap-guard", daemon=True)
        self._thread.start()

    def stop(self) -> EnergyReading:
        if self._thread is None:
            raise RuntimeError("RaplMeter.stop() called without start()")
        self.close()
        self._accumulate()
        return EnergyReading(joules=self._total_uj / 1e6, duration_s=time.monotonic() - self._t0, samples=self._reads)

    def close(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "zones": [
                {"name": z.name, "path": str(z.path), "max_energy_range_uj": z.max_energy_range_uj} for z in self.zones
            ],
            "wrap_check_s": self.wrap_check_s,
            "notes": "RAPL counters are reliable for windows of 50 ms or more; core/uncore lie inside the package and "
            "psys covers the platform, so neither is added",
        }

    def _accumulate(self) -> None:
        now = [z.read_uj() for z in self.zones]
        self._total_uj += sum(
            counter_delta(a, b, z.max_energy_range_uj) for z, a, b in zip(self.zones, self._last, now, strict=True)
        )
        self._last = now
        self._reads += 1

    def _guard(self) -> None:
        while not self._halt.wait(self.wrap_check_s):
            self._accumulate()
