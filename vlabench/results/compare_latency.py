"""The latency half of ``vlabench compare``: runs of one configuration in each folder, ideally interleaved (baseline,
candidate, baseline, …), and a noise model calibrated on their own drift.

Other load on the machine only ever slows a run down, and it comes and goes: a run may be slow as a whole, or drift
within itself. So each side is summarized twice. Its *typical* latency is the median, over its steady runs (those
whose median moved by at most ``STEADY_DRIFT`` between their first and second half; all runs when none is steady),
of each run's median. Its *least disturbed* run is the one with the fastest median. A regression is a change that
both show beyond the threshold, and that the least disturbed runs show beyond their noise: a seeded percentile
bootstrap of the relative difference of their medians, widened on both sides by the noise the runs show themselves —
each least disturbed run's drift, and each side's spread between processes: how much slower its second least
disturbed run is than its first, on the runs' 10th percentile (``LEAST_DISTURBED``: the part of a run other load
touches least). One fast outlier cannot make a regression (the typical median must move too), nor can one slow
baseline run hide one; a machine so loaded that no two runs of a side agree widens the interval beyond any
threshold (the minimum detectable change says by how much). With fewer than ``MIN_RUNS`` runs a side the noise
between processes is not measured (the two summaries are the same run): the verdict says so.

The minimum detectable change is the smallest change the comparison could call: the threshold, or the widened
interval's half-width when that is larger. Background load and noise warnings the runs recorded are carried into the
verdict's caveats, with each side's load averages. ``benchmarks/compare_aa.py`` measures the false-regression rate
of separate-process A/A pairs and the share of +25% slowdowns caught.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from vlabench.results.schema import RunResult
from vlabench.results.sustained import DRIFT_WARNING

Verdict = Literal["regression", "improvement", "unchanged", "too few samples", "not comparable", "no data"]
MIN_RUNS = 3
"""Runs of each side the stated false-regression rate needs (interleaved): fewer cannot see the noise between
processes."""
STEADY_DRIFT = DRIFT_WARNING
"""A run whose median moves more than this between its halves was disturbed while it ran: left out of the typical
median (when its side has a steadier run)."""
LEAST_DISTURBED = 0.10
"""The quantile of a run's samples that stands for its least disturbed speed, when its runs are compared."""
BUSY_BACKGROUND_PERCENT = 25.0
"""A run that started with other processes keeping the CPUs this busy carries the caveat (as its own warning does)."""


class Side(BaseModel):
    """One side's runs as the noise model sees them."""

    runs: int
    typical_ms: float = Field(description="median over the steady runs of each run's median")
    fastest_ms: float = Field(description="the least disturbed run's median")
    unsteady: int = Field(description="runs whose median drifted more than STEADY_DRIFT within the run")
    spread: float = Field(
        description="between processes: the second least disturbed run's 10th percentile over the first's, - 1"
    )
    busy: int = Field(description="runs that started under background load")
    noisy: int = Field(description="runs that warned the compared phase's timing is noisy")
    load_average_1m: list[float | None] = Field(description="each run's 1-minute load average at its start")


class Latency(BaseModel):
    baseline_p50_ms: float = Field(description="the baseline's typical median")
    candidate_p50_ms: float
    relative_change: float = Field(description="of the typical medians: (candidate - baseline) / baseline")
    least_disturbed_change: float | None = Field(default=None, description="of the least disturbed runs' medians")
    ci_low: float | None
    ci_high: float | None
    noise: float = Field(
        default=0.0, description="the runs' own noise (drift, spread between processes) that widened the interval"
    )
    minimum_detectable: float | None = Field(default=None, description="the smallest change this comparison can call")
    baseline: Side | None = None
    candidate: Side | None = None
    caveats: list[str] = Field(default_factory=list)
    verdict: Verdict


def bootstrap_relative_median_change(
    baseline: Iterable[float], candidate: Iterable[float], confidence: float, resamples: int, seed: int
) -> tuple[float, float, float]:
    """(point, low, high) of (median(candidate) − median(baseline)) / median(baseline), percentile bootstrap."""
    base, cand = np.asarray(list(baseline), dtype=np.float64), np.asarray(list(candidate), dtype=np.float64)
    rng = np.random.default_rng(seed)
    base_medians = np.median(rng.choice(base, size=(resamples, base.size)), axis=1)
    cand_medians = np.median(rng.choice(cand, size=(resamples, cand.size)), axis=1)
    changes = (cand_medians - base_medians) / base_medians
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(changes, [alpha, 1.0 - alpha])
    point = (np.median(cand) - np.median(base)) / np.median(base)
    return float(point), float(low), float(high)


def drift(samples: Iterable[float]) -> float:
    """How far a run's median moves over its own length: |median(second half) − median(first half)| / median, in
    the order the samples were timed (0 for fewer than four samples)."""
    values = np.asarray(list(samples), dtype=np.float64)
    half = values.size // 2
    if half < 2:
        return 0.0
    return float(abs(np.median(values[half:]) - np.median(values[:half])) / np.median(values))


def _side(runs: Sequence[RunResult], phase: str) -> tuple[Side, list[float]]:
    """A side's summary and its least disturbed run's samples."""
    samples = [run.timing.samples_ms[phase] for run in runs]
    medians = [float(np.median(values)) for values in samples]
    drifts = [drift(values) for values in samples]
    steady = [median for median, moved in zip(medians, drifts, strict=True) if moved <= STEADY_DRIFT] or medians
    fastest = int(np.argmin(medians))
    lows = sorted(float(np.quantile(values, LEAST_DISTURBED)) for values in samples)
    side = Side(
        spread=lows[1] / lows[0] - 1 if len(lows) > 1 else 0.0,
        runs=len(runs),
        typical_ms=float(np.median(steady)),
        fastest_ms=medians[fastest],
        unsteady=sum(moved > STEADY_DRIFT for moved in drifts),
        busy=sum(run.system_state.background_cpu_percent > BUSY_BACKGROUND_PERCENT for run in runs),
        noisy=sum(any(w.startswith(f"{phase}: ") and "noisy" in w for w in run.warnings) for run in runs),
        load_average_1m=[run.system_state.load_average_1m for run in runs],
    )
    return side, samples[fastest]


def caveats(baseline: Sequence[RunResult], candidate: Sequence[RunResult], sides: dict[str, Side]) -> list[str]:
    """What a reader must know before trusting the verdict: too few runs, runs not interleaved, runs disturbed."""
    found = []
    fewest = min(side.runs for side in sides.values())
    if fewest < MIN_RUNS:
        found.append(
            f"{fewest} run(s) on a side: the noise between processes is not measured; interleave at least {MIN_RUNS} "
            "runs of each (baseline, candidate, baseline, …) for the false-regression rate benchmarks/compare_aa.py "
            "states"
        )
    elif max(run.started_utc for run in baseline) < min(run.started_utc for run in candidate) or max(
        run.started_utc for run in candidate
    ) < min(run.started_utc for run in baseline):
        found.append("the runs were not interleaved: a drift of the machine between the two batches reads as a change")
    for name, side in sides.items():
        loads = [value for value in side.load_average_1m if value is not None]
        shown = f" (1-minute load average {min(loads):.2f}–{max(loads):.2f})" if loads else ""
        if side.busy:
            found.append(
                f"{name}: {side.busy} of {side.runs} runs started with other processes keeping the CPUs more than "
                f"{BUSY_BACKGROUND_PERCENT:.0f}% busy{shown}"
            )
        if side.unsteady:
            kept = "left out of its typical median" if side.unsteady < side.runs else "every run drifted"
            found.append(
                f"{name}: {side.unsteady} of {side.runs} runs drifted more than {STEADY_DRIFT:.0%} within the run "
                f"({kept})"
            )
        if side.noisy:
            found.append(f"{name}: {side.noisy} of {side.runs} runs warned that this phase's timing is noisy")
    return found


def latency_change(
    baseline: Sequence[RunResult],
    candidate: Sequence[RunResult],
    *,
    threshold: float,
    confidence: float,
    resamples: int,
    seed: int,
    phase: str,
) -> Latency | None:
    """The latency verdict of one configuration's runs in each folder (None when neither side timed ``phase``)."""
    base_runs = [run for run in baseline if run.timing.samples_ms.get(phase)]
    cand_runs = [run for run in candidate if run.timing.samples_ms.get(phase)]
    if not base_runs or not cand_runs:
        return None
    (base, base_fastest), (cand, cand_fastest) = _side(base_runs, phase), _side(cand_runs, phase)
    sides = {"baseline": base, "candidate": cand}
    change = (cand.typical_ms - base.typical_ms) / base.typical_ms
    common = dict(
        baseline_p50_ms=base.typical_ms,
        candidate_p50_ms=cand.typical_ms,
        relative_change=change,
        baseline=base,
        candidate=cand,
        caveats=caveats(base_runs, cand_runs, sides),
    )
    if len(base_fastest) < 2 or len(cand_fastest) < 2:
        return Latency(**common, ci_low=None, ci_high=None, verdict="too few samples")
    least, low, high = bootstrap_relative_median_change(base_fastest, cand_fastest, confidence, resamples, seed)
    noise = math.hypot(drift(base_fastest), drift(cand_fastest), base.spread, cand.spread)
    low, high = low - noise, high + noise
    verdict: Verdict = "unchanged"
    if low > 0 and least > threshold and change > threshold:
        verdict = "regression"
    elif high < 0 and least < -threshold and change < -threshold:
        verdict = "improvement"
    return Latency(
        **common,
        least_disturbed_change=least,
        ci_low=low,
        ci_high=high,
        noise=noise,
        minimum_detectable=max(threshold, (high - low) / 2),
        verdict=verdict,
    )
