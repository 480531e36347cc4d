"""Latency statistics over timed samples, with distribution-free confidence intervals of their percentiles."""

from __future__ import annotations

import math

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
        sample, saying so; the point p99 for statistics recorded without intervals."""
        if not self.intervals:
            return self.p99, "p99"
        upper = self.intervals.get("p99", (None, None))[1]
        if upper is not None:
            return upper, f"the upper end of p99's {CONFIDENCE:.0%} interval"
        needed = P99_BOUND_SAMPLES
        return self.max, f"not enough samples for p99 ({self.count} of the {needed} a bound needs): the slowest sample"


def _binomial_cdf(n: int, q: float) -> np.ndarray:
    """P(Binomial(n, q) ≤ k) for k = 0..n (exact in log space; normal approximation above 5000 trials)."""
    k = np.arange(n + 1)
    if n > 5000:
        z = (k + 0.5 - n * q) / math.sqrt(n * q * (1 - q))
        return np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in z])
    log_pmf = (
        np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)])
        + k * math.log(q)
        + (n - k) * math.log1p(-q)
    )
    return np.cumsum(np.exp(log_pmf))


def order_statistic_interval(sorted_ms: np.ndarray, q: float) -> tuple[float | None, float | None]:
    """The ``CONFIDENCE`` interval of the q-quantile: order statistics X(l), X(u) with P(Bin(n, q) < l) ≤ α/2 and
    P(Bin(n, q) < u) ≥ 1 - α/2; an end the n samples cannot reach is None."""
    n, tail = sorted_ms.size, (1 - CONFIDENCE) / 2
    cdf = _binomial_cdf(n, q)  # cdf[k - 1] = P(Bin < k)
    below = np.concatenate([[0.0], cdf[:-1]])  # below[k] = P(Bin < k), k = 0..n
    lows = np.nonzero(below[1:] <= tail)[0]
    highs = np.nonzero(below[1:] >= 1 - tail)[0]
    low = float(sorted_ms[lows[-1]]) if lows.size else None
    high = float(sorted_ms[highs[0]]) if highs.size else None
    return low, high


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
