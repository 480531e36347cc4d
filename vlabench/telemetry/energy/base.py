"""The energy-meter interface, the reading it returns, and the power poller shared by the polling meters."""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict


class EnergyReading(BaseModel):
    """Energy over one measurement window."""

    model_config = ConfigDict(frozen=True)

    joules: float
    duration_s: float
    samples: int  # power samples or counter reads used

    @property
    def average_w(self) -> float:
        return self.joules / self.duration_s if self.duration_s > 0 else 0.0


class EnergyMeter(ABC):
    """Measures energy over windows opened by start() and closed by stop()."""

    sensor: ClassVar[str | None] = None
    """The sensor this meter reads, by the name device profiles list under ``sensors`` and ``--energy-meter`` takes;
    None for a meter chosen otherwise (the estimate)."""
    by_name: ClassVar[bool] = True
    """``--energy-meter <sensor>`` (and ``auto``, for a profile listing the sensor) opens it; False for a meter
    chosen by another flag (the external log's ``--energy-log``)."""
    method: str
    scope: str
    label: Literal["measured", "estimated"]
    sampling_period_s: float | None

    @classmethod
    def open(cls) -> EnergyMeter:
        """The meter on this host's first such sensor (``--energy-meter <sensor>``; UnavailableError without one)."""
        return cls()

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> EnergyReading:
        """Energy over the window since the last start()."""

    @abstractmethod
    def close(self) -> None:
        """Stop threads and release handles; idempotent."""

    def describe(self) -> dict[str, Any]:
        """Method, scope, label and sampling period; meters add sensor paths, rail names and assumptions."""
        return {
            "method": self.method,
            "scope": self.scope,
            "label": self.label,
            "sampling_period_s": self.sampling_period_s,
        }

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def integrate_power(samples: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Joules over [t0, t1] from (time_s, watts) samples: trapezoid rule, linear interpolation at the window edges.

    Before the first sample and after the last one the nearest sample's power is held.
    """
    if not samples:
        raise ValueError("no power samples to integrate")
    if t1 <= t0:
        return 0.0
    points = sorted(samples, key=lambda sample: sample[0])  # stable: equal times keep their order (steps)
    times = [t for t, _ in points]

    def power_at(t: float) -> float:
        i = bisect.bisect_right(times, t)
        if i == 0:
            return points[0][1]
        if i == len(points):
            return points[-1][1]
        (ta, wa), (tb, wb) = points[i - 1], points[i]
        return wa if tb == ta else wa + (wb - wa) * (t - ta) / (tb - ta)

    inside = [(t, w) for t, w in points if t0 < t < t1]
    edges = [(t0, power_at(t0)), *inside, (t1, power_at(t1))]
    return sum((tb - ta) * (wa + wb) / 2 for (ta, wa), (tb, wb) in itertools.pairwise(edges))


class PowerPoller:
    """Calls read_watts() every period_s on a daemon thread and integrates the samples over [start(), stop()]."""

    def __init__(self, read_watts: Callable[[], float], period_s: float) -> None:
        if period_s <= 0:
            raise ValueError(f"polling period must be positive, got {period_s}")
        self.read_watts = read_watts
        self.period_s = period_s
        self._samples: list[tuple[float, float]] = []
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._t0 = 0.0

    def start(self) -> None:
        """Take a sample now and keep sampling until stop()."""
        self.close()
        self._error = None
        self._halt.clear()
        self._t0 = time.monotonic()
        self._samples = [(self._t0, self.read_watts())]
        self._thread = threading.Thread(target=self._run, name="vlabench-power-poller", daemon=True)
        self._thread.start()

    def stop(self) -> EnergyReading:
        """Take a final sample, stop the thread and return the energy since start()."""
        if self._thread is None:
            raise RuntimeError("PowerPoller.stop() called without start()")
        t1 = time.monotonic()
        self.close()
        if self._error is not None:
            raise self._error
        samples = [*self._samples, (t1, self.read_watts())]
        return EnergyReading(
            joules=integrate_power(samples, self._t0, t1), duration_s=t1 - self._t0, samples=len(samples)
        )

    def close(self) -> None:
        """Stop the sampling thread if one runs; idempotent."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        due = self._t0 + self.period_s
        while not self._halt.wait(max(0.0, due - time.monotonic())):
            try:
                watts = self.read_watts()
            except Exception as error:  # re-raised by stop()
                self._error = error
                return
            now = time.monotonic()
            self._samples.append((now, watts))
            due = max(due + self.period_s, now)


class PollingMeter(EnergyMeter):
    """A meter that integrates polled power; subclasses create ``self._poller`` around their reader."""

    _poller: PowerPoller

    def start(self) -> None:
        self._poller.start()

    def stop(self) -> EnergyReading:
        return self._poller.stop()

    def close(self) -> None:
        self._poller.close()
