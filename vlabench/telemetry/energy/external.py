"""Wall power from an external meter's CSV log (``timestamp,watts`` rows, written by the meter's own logger)."""

from __future__ import annotations

import csv
import itertools
import math
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from vlabench.errors import InputError, UnavailableError
from vlabench.telemetry.energy.base import EnergyMeter, EnergyReading, integrate_power
from vlabench.yaml_data import read_text_file

TIME_COLUMNS = ("timestamp", "time", "unix_time", "ts")
POWER_COLUMNS = ("power_w", "watts", "w", "power")


def parse_timestamp(text: str) -> float:
    """UNIX seconds, or ISO-8601 (a trailing Z is UTC; without an offset the host's local time zone is assumed)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    value = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        return datetime.fromisoformat(value).timestamp()
    except (OverflowError, OSError) as error:  # a date the platform's clock cannot represent
        raise ValueError(f"timestamp {text!r} is out of range ({error})") from None


def _is_timestamp(text: str) -> bool:
    try:
        parse_timestamp(text)
    except ValueError:
        return False
    return True


def _columns(header: list[str], path: Path) -> tuple[int, int]:
    names = [h.strip().lower() for h in header]
    time_index = next((names.index(c) for c in TIME_COLUMNS if c in names), 0)
    power_index = next((names.index(c) for c in POWER_COLUMNS if c in names), None)
    if power_index is None:
        raise InputError(f"{path}: header {header} has no power column; name it one of {', '.join(POWER_COLUMNS)}")
    return time_index, power_index


MAX_WATTS = 1e6
"""The largest power a log row may state (1 MW): more is a unit or parsing error, not a measurement."""


def read_power_log(path: str | Path) -> list[tuple[float, float]]:
    """(UNIX time, watts) rows of a CSV power log, in file order; the header is optional (without one: timestamp,
    watts). Timestamps must be finite and strictly increasing, watts finite and within 0..MAX_WATTS: anything else
    is an InputError naming the file and line, never a silently wrong integral.

    An unterminated last line that does not parse is taken as a row the logger is still writing and skipped. A path
    that is not a regular UTF-8 text file (a FIFO, a directory, a device, a binary) is an InputError.
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise UnavailableError(
            f"cannot read the power log {path} (No such file or directory); start the meter's logger before the run"
        )
    text = read_text_file(path, "power log")
    lines = text.splitlines()
    try:
        rows = [(n, row) for n, row in enumerate(csv.reader(lines), 1) if row and not row[0].startswith("#")]
    except csv.Error as error:
        raise InputError(f"{path}: not a CSV power log ({error})") from None
    time_index, power_index = 0, 1
    if rows and not _is_timestamp(rows[0][1][0]):
        time_index, power_index = _columns(rows.pop(0)[1], path)
    samples: list[tuple[float, float]] = []
    lines_of: list[int] = []
    for line, row in rows:
        try:
            samples.append(_sample(row, time_index, power_index, samples[-1][0] if samples else None, lines_of))
        except ValueError as error:
            if line == len(lines) and not text.endswith("\n"):
                break  # the row the logger is still writing
            raise InputError(f"{path}:{line}: {error} in power log row {','.join(row)!r}") from None
        lines_of.append(line)
    return samples


def _sample(
    row: list[str], time_index: int, power_index: int, previous: float | None, lines_of: list[int]
) -> tuple[float, float]:
    """One row's (time, watts); a ValueError says what is wrong with it."""
    try:
        t, watts = parse_timestamp(row[time_index]), float(row[power_index])
    except IndexError:
        raise ValueError(f"no column {max(time_index, power_index) + 1}") from None
    except (ValueError, OverflowError) as error:
        raise ValueError(f"malformed value ({error})") from None
    if not (math.isfinite(t) and math.isfinite(watts)):
        raise ValueError("non-finite value")
    if not 0 <= watts <= MAX_WATTS:
        raise ValueError(f"power {watts:g} W outside 0..{MAX_WATTS:g} W")
    if previous is not None and t <= previous:
        order = "repeats" if t == previous else "goes back before"
        raise ValueError(f"timestamp {order} the one on line {lines_of[-1]} (timestamps must strictly increase)")
    return t, watts


class ExternalCsvMeter(EnergyMeter):
    """Integrates the rows of an external wall-power meter's log that fall in (or bracket) the window.

    The log is re-read at stop(); the meter's clock and this host's must agree (both UNIX time).
    """

    sensor = "external-csv"
    by_name = False  # --energy-log FILE
    method = "external-csv"
    scope = "wall"
    label = "measured"
    sampling_period_s = None  # set by the external logger; describe() reports the median spacing seen

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        self._t0: float | None = None
        self._median_spacing_s: float | None = None

    def check(self) -> None:
        """Read the log as it stands: a missing log, a FIFO, a binary file, a malformed or out-of-order row is refused
        when the run is planned, not after its timing pass (the logger must be running before the run starts)."""
        read_power_log(self.path)

    def start(self) -> None:
        self._t0 = self.clock()

    def stop(self) -> EnergyReading:
        if self._t0 is None:
            raise RuntimeError("ExternalCsvMeter.stop() called without start()")
        t0, t1 = self._t0, self.clock()
        self._t0 = None
        samples = read_power_log(self.path)
        before = [s for s in samples if s[0] <= t0][-1:]
        after = [s for s in samples if s[0] >= t1][:1]
        used = [*before, *(s for s in samples if t0 < s[0] < t1), *after]
        spacings = [b[0] - a[0] for a, b in itertools.pairwise(samples)]
        self._median_spacing_s = statistics.median(spacings) if spacings else None
        slack = self._median_spacing_s or 0.0
        if len(used) < 2 or used[0][0] > t0 + slack or used[-1][0] < t1 - slack:
            raise UnavailableError(
                f"the power log {self.path} must cover the run with at least two samples: it has {len(used)} in or "
                f"around the window {t0:.3f}..{t1:.3f} (UNIX s); start the meter's logger before the run, let it "
                "flush after, and check both clocks agree"
            )
        return EnergyReading(joules=integrate_power(used, t0, t1), duration_s=t1 - t0, samples=len(used))

    def close(self) -> None:
        """Nothing to release: the log is only read at stop()."""

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "log": str(self.path),
            "median_sample_spacing_s": self._median_spacing_s,
            "notes": "whole-system power at the wall socket, including the PSU's losses and idle components",
        }
