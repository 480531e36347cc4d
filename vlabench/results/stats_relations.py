"""A phase's statistics against what they summarize: recomputed from the recorded samples (count, percentiles, mean,
stdev, CoV and each percentile's interval), or, for statistics stored without samples (a served run's), bounded by
what any samples could give (order, moments, the interval's ends at the ranks the count allows)."""

from __future__ import annotations

import math
from itertools import pairwise

from vlabench.measure.stats import PERCENTILES, Stats, interval_ranks, summarize
from vlabench.results.relation_terms import EXACT, Problems, close, is_latency, latency_message

ORDER_STATISTICS = ("min", "p50", "p90", "p99", "max")
SUMMARY = ("count", "min", "p50", "p90", "p99", "max", "mean", "stdev", "cov")
"""The figures ``summarize`` computes from samples, compared one by one."""
RECOMPUTED = 1e-6
"""Statistics recomputed from their samples agree to this relative share (summation order, numpy versions)."""


def latency_problems(field: str, stats: Stats, floor: float, zero: bool = False) -> Problems:
    """A phase's statistics: finite latencies (at least ``floor`` ms, > 0 unless ``zero``: a wait) in order, min ≤
    p50 ≤ p90 ≤ p99 ≤ max, the mean between min and max, a count of at least one, a finite stdev and CoV ≥ 0."""
    found = [
        (f"{field}.{name}", latency_message(value, floor, zero))
        for name in ("min", "p50", "p90", "p99", "max", "mean")
        if not is_latency(value := getattr(stats, name), floor, zero)
    ]
    if found:
        return found
    ordered = [stats.min, stats.p50, stats.p90, stats.p99, stats.max]
    slack = 1e-9 * stats.max  # interpolated percentiles may exceed their neighbours by rounding
    if any(low > high + slack for low, high in pairwise(ordered)):
        shown = ", ".join(f"{value:g}" for value in ordered)
        found.append((field, f"percentiles out of order: min, p50, p90, p99, max = {shown} ms"))
    if not stats.min - slack <= stats.mean <= stats.max + slack:
        found.append((f"{field}.mean", f"{stats.mean:g} ms lies outside min..max"))
    if stats.count < 1:
        found.append((f"{field}.count", f"{stats.count}: statistics of no sample"))
    if not (math.isfinite(stats.stdev) and stats.stdev >= 0 and math.isfinite(stats.cov) and stats.cov >= 0):
        found.append((f"{field}.stdev", f"stdev {stats.stdev:g}, CoV {stats.cov:g}: must be finite and ≥ 0"))
    return found


def sample_problems(field: str, stats: Stats, samples: list[float]) -> Problems:
    """The statistics are those of their samples: every figure ``summarize`` gives, each percentile's interval."""
    if len(samples) != stats.count:
        return [(field, f"statistics of the samples: {len(samples)} samples against a count of {stats.count}")]
    expected = summarize(samples)
    for name in SUMMARY[1:]:
        recorded, computed = getattr(stats, name), getattr(expected, name)
        if not close(recorded, computed, EXACT, RECOMPUTED):
            return [
                (
                    f"{field}.{name}",
                    f"statistics of the samples: {name} {recorded:g} recorded, {computed:g} from the {stats.count} "
                    "samples",
                )
            ]
    for name, recorded in stats.intervals.items():  # none before schema 1.3
        computed = expected.intervals.get(name)
        if computed is None or not _same_ends(recorded, computed):
            return [
                (
                    f"{field}.intervals.{name}",
                    f"interval from the samples: {_shown(recorded)} recorded, {_shown(computed)} from the "
                    f"{stats.count} samples",
                )
            ]
    return []


def summary_problems(field: str, stats: Stats) -> Problems:
    """Statistics stored without their samples: the CoV is stdev ÷ mean, the stdev within what min..max allows, and
    each interval's ends are the order statistics the count allows (none where it cannot bound the percentile; the
    slowest or fastest sample where the rank is the last or first), lying within min..max, the upper at or above its
    percentile."""
    found = _moment_problems(field, stats)
    for name, q in PERCENTILES.items():
        if not stats.intervals:  # before schema 1.3
            break
        low, high = stats.intervals.get(name, (None, None))
        low_rank, high_rank = interval_ranks(stats.count, q)
        point = getattr(stats, name)
        ends = ((low, low_rank), (high, high_rank))
        problem = None
        if any((value is None) != (rank is None) for value, rank in ends):
            problem = f"{stats.count} samples give the ends {_ranks(low_rank, high_rank)}"
        elif any(value is not None and not stats.min <= value <= stats.max for value, _ in ends):
            problem = f"an end outside the samples' {stats.min:g}..{stats.max:g} ms"
        elif high is not None and high < point * (1 - EXACT):
            problem = f"its upper end below the {name} of {point:g} ms"
        elif (low_rank == 0 and low != stats.min) or (high_rank == stats.count - 1 and high != stats.max):
            problem = (
                f"the ends at ranks {_ranks(low_rank, high_rank)} of {stats.count} are the fastest or slowest sample"
            )
        if problem:
            found.append((f"{field}.intervals.{name}", f"interval from the samples: {_shown((low, high))}: {problem}"))
    return found


def _moment_problems(field: str, stats: Stats) -> Problems:
    """CoV = stdev ÷ mean; a sample stdev is at most (max − min) ÷ 2 × √(n ÷ (n − 1)), and 0 for one sample."""
    found = []
    expected_cov = stats.stdev / stats.mean if stats.mean > 0 else 0.0
    if not close(stats.cov, expected_cov, EXACT, RECOMPUTED):
        found.append(
            (f"{field}.cov", f"moments of the samples: CoV {stats.cov:g} is not stdev ÷ mean = {expected_cov:g}")
        )
    n = stats.count
    widest = (stats.max - stats.min) / 2 * math.sqrt(n / (n - 1)) if n > 1 else 0.0
    if stats.stdev > widest * (1 + RECOMPUTED) + EXACT:
        found.append(
            (
                f"{field}.stdev",
                f"moments of the samples: a stdev of {stats.stdev:g} ms from {n} samples within "
                f"{stats.min:g}..{stats.max:g} ms (at most {widest:g})",
            )
        )
    return found


def _same_ends(recorded: tuple[float | None, float | None], computed: tuple[float | None, float | None]) -> bool:
    return all(
        (a is None and b is None) or (a is not None and b is not None and close(a, b, EXACT, RECOMPUTED))
        for a, b in zip(recorded, computed, strict=True)
    )


def _shown(ends: tuple[float | None, float | None] | None) -> str:
    if ends is None:
        return "none"
    return "[" + ", ".join("none" if end is None else f"{end:g}" for end in ends) + "]"


def _ranks(low: int | None, high: int | None) -> str:
    return "[" + ", ".join("none" if rank is None else f"#{rank}" for rank in (low, high)) + "]"
