"""What every relation module shares: a problem, the tolerances, closeness, and what a latency may be.

A relation is one figure computed from others (the samples, the settings, the device) and compared with the recorded
one. The tolerances cover rounding and timer granularity, never a measurement error.
"""

from __future__ import annotations

import math
from typing import Any

Problems = list[tuple[str, str]]
"""(field, "rule: what is wrong with it")."""
RunResult = Any
"""A ``results.schema.RunResult`` (the schema imports the relations: they read its fields, nothing more)."""

RELATIVE = 0.02
"""Sums of means and products of figures agree within 2% (plus ``ABSOLUTE_MS`` for latencies)."""
ABSOLUTE_MS = 0.5
"""Timer granularity and the gaps between nested spans, per sum."""
EXACT = 1e-9
"""Figures computed by one formula from the recorded ones (JSON keeps every float exactly) agree to rounding."""
WALL_SLACK_S = 1.0
"""A run's passes may exceed its start-to-finish time by this much (clock reads around them, timestamp rounding)."""
MIN_LATENCY_MS = 1e-3
"""1 µs: no policy inference is faster; an end-to-end figure below it is a unit or clock error, never a win."""
MAX_LATENCY_MS = 86_400_000.0
"""One day: a longer inference is no measurement."""


def close(a: float, b: float, absolute: float = 0.0, relative: float = RELATIVE) -> bool:
    """``a`` and ``b`` agree within ``relative`` of the larger plus ``absolute``."""
    return abs(a - b) <= relative * max(abs(a), abs(b)) + absolute


def at_most(a: float, b: float, absolute: float = 0.0, relative: float = RELATIVE) -> bool:
    """``a`` ≤ ``b`` within the tolerances."""
    return a <= b * (1 + relative) + absolute


def is_latency(value: float, floor: float, zero: bool = False) -> bool:
    """A finite latency in ``floor``..one day (``zero``: a wait, which may be 0; else > 0)."""
    if not math.isfinite(value) or value > MAX_LATENCY_MS:
        return False
    return value >= 0 if zero else value >= floor and value > 0


def latency_message(value: float, floor: float, zero: bool = False) -> str:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        return f"{value:g} ms: a {'wait' if zero else 'latency'} is a finite, {'≥ 0' if zero else 'positive'} number"
    if value > MAX_LATENCY_MS:
        return f"{value:g} ms: longer than a day, no measurement"
    return f"{value:g} ms: below {floor * 1000:g} µs, no inference is that fast"


def wall_seconds(result: RunResult) -> float:
    """The run's start-to-finish time, s."""
    return (result.finished_utc - result.started_utc).total_seconds()


def is_offload(result: RunResult) -> bool:
    """A ``run --remote`` result: the timed pass, energy and memory are the server's baseline, measured there before
    this result's start; only the serving block was measured between its start and finish."""
    return result.serving is not None and result.serving.transport == "grpc"
