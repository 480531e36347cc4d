"""Latency statistics over timed samples, with distribution-free confidence intervals of their percentiles."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel, Field

NOISY_COV = 0.05
CONFIDENCE = 0.95
"""Two-sided confidence of a percentile's interval; its upper end is a one-sided 97.5% bound."""
PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


class Stats(BaseModel):
    """Summary of one phase's samples, in milliseconds."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float
    stdev: float
    cov: float
    intervals: dict[str, tuple[float | None, float | None]] = Field(
        default_factory=dict,
        description="95% confidence interval of each percentile from order statistics (no assumption on the "
        "distribution); an end is None when the samples are too few to bound it (empty before schema 1.3)",
    )

    def judged_p99(self) -> tuple[float, str]:
        """The latency a p99 gate judges: the upper end of p99's interval; with too few samples for one, the slowest
        sample, saying so; the point p99 for statistics recorded without intervals. The recorded interval is not
        trusted: its upper end is used only when the count says the samples can bound p99 and it lies between the
        point p99 and the slowest sample (an order statistic above p99); otherwise the slowest sample is judged."""
        if not self.intervals:
            return self.p99, "p99"
        if interval_ranks(self.count, PERCENTILES["p99"])[1] is None:
            needed = P99_BOUND_SAMPLES
            return (
                self.max,
                f"not enough samples for p99 ({self.count} of the {needed} a bound needs): the slowest sample",
            )
        upper = self.intervals.get("p99", (None, None))[1]
        if upper is None or not self.p99 <= upper <= self.max:
            return self.max, "p99's recorded interval is not one of these samples': the slowest sample"
        return upper, f"the upper end of p99's {CONFIDENCE:.0%} interval"


EXACT_BINOMIAL_TRIALS = 5000
"""Up to this many samples the binomial is summed exactly (in log space); above it, its normal approximation."""


def _binomial_cdf(n: int, q: float) -> np.ndarray:
    """P(Binomial(n, q) ≤ k) for k = 0..n, exact in log space (n ≤ ``EXACT_BINOMIAL_TRIALS``)."""
    k = np.arange(n + 1)
    log_pmf = (
        np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)])
        + k * math.log(q)
        + (n - k) * math.log1p(-q)
    )
    return np.cumsum(np.exp(log_pmf))


def _normal_cdf(n: int, q: float, k: int) -> float:
    """P(Binomial(n, q) ≤ k) by the normal approximation with continuity correction."""
    z = (k + 0.5 - n * q) / math.sqrt(n * q * (1 - q))
    return 0.5 * math.erfc(-z / math.sqrt(2))


def _first_rank(n: int, at_least: Callable[[int], bool]) -> int | None:
    """The smallest j in 0..n-1 for which the monotone ``at_least(j)`` holds (bisection), or None."""
    low, high = 0, n
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if at_least(middle) else (middle + 1, high)
    return low if low < n else None


@functools.lru_cache(maxsize=256)
def interval_ranks(n: int, q: float) -> tuple[int | None, int | None]:
    """The 0-based ranks (l, u) among n sorted samples of the ``CONFIDENCE`` interval of the q-quantile: the order
    statistics X(l), X(u) with P(Bin(n, q) < l) ≤ α/2 and P(Bin(n, q) < u) ≥ 1 - α/2; a rank the n samples cannot
    reach is None. It depends on n alone, so a reader can tell which ends a count allows (any count: above
    ``EXACT_BINOMIAL_TRIALS`` the ranks are found by bisection, never by listing n values)."""
    if n < 1:
        return None, None
    tail = (1 - CONFIDENCE) / 2
    if n > EXACT_BINOMIAL_TRIALS:  # P(Bin < j + 1) = P(Bin ≤ j)
        above = _first_rank(n, lambda j: _normal_cdf(n, q, j) > tail)
        high = _first_rank(n, lambda j: _normal_cdf(n, q, j) >= 1 - tail)
        low = n - 1 if above is None else above - 1
        return (low if low >= 0 else None), high
    below = _binomial_cdf(n, q)[:-1]  # below[j] = P(Bin ≤ j) = P(Bin < j + 1), j = 0..n-1
    lows = np.nonzero(below <= tail)[0]
    highs = np.nonzero(below >= 1 - tail)[0]
    return (int(lows[-1]) if lows.size else None), (int(highs[0]) if highs.size else None)


def order_statistic_interval(sorted_ms: np.ndarray, q: float) -> tuple[float | None, float | None]:
    """The ``CONFIDENCE`` interval of the q-quantile: the order statistics at ``interval_ranks``."""
    low, high = interval_ranks(int(sorted_ms.size), q)
    return (None if low is None else float(sorted_ms[low])), (None if high is None else float(sorted_ms[high]))


def samples_to_bound(q: float) -> int:
    """The fewest samples whose largest is a ``CONFIDENCE`` two-sided upper bound of the q-quantile."""
    return math.ceil(math.log((1 - CONFIDENCE) / 2) / math.log(q))


P99_BOUND_SAMPLES = samples_to_bound(PERCENTILES["p99"])
"""368: the fewest samples whose slowest bounds p99 at ``CONFIDENCE``; a run's default minimum count."""


def summarize(samples_ms: list[float]) -> Stats:
    values = np.asarray(samples_ms, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no samples to summarize")
    mean = float(values.mean())
    stdev = float(values.std(ddof=1)) if values.size > 1 else 0.0
    p50, p90, p99 = (float(v) for v in np.percentile(values, [50, 90, 99]))
    return Stats(
        count=int(values.size),
        mean=mean,
        p50=p50,
        p90=p90,
        p99=p99,
        min=float(values.min()),
        max=float(values.max()),
        stdev=stdev,
        cov=stdev / mean if mean > 0 else 0.0,
        intervals={name: order_statistic_interval(np.sort(values), q) for name, q in PERCENTILES.items()},
    )
