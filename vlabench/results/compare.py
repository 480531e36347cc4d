"""``vlabench compare``: match two results folders run by run and flag latency, energy and correctness regressions.

Latency: a seeded percentile bootstrap of the relative difference of medians, (candidate − baseline) / baseline,
over the raw samples of one phase, widened on both sides by the runs' own drift: how far each run's median moves
between its first and second half (in the order timed), combined over the two runs. A bootstrap over one pair sees
only the noise within each run; two back-to-back runs of one configuration also differ by what drifts between them
(clocks, caches, other load), and a run's drift over its own length is the estimate of that which the pair holds. A
run regressed when the whole widened interval lies above zero and the point estimate exceeds the relative
threshold (``benchmarks/compare_aa.py`` measures how often back-to-back runs of one configuration come out
"regression"). Energy results hold one window
and no dispersion, so joules per action regress when they grow by more than their own relative threshold.
Correctness regresses when the baseline is valid and the candidate is not (a NaN action error included); the match
keeps the candidate's reason."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from vlabench.config import SEED_LIMIT
from vlabench.errors import InputError, unknown_name
from vlabench.results.aggregate import load_results
from vlabench.results.schema import RunResult
from vlabench.vocab import Phase

Verdict = Literal["regression", "improvement", "unchanged", "too few samples", "not comparable", "no data"]


MAX_THRESHOLD = 10.0
"""Relative thresholds are 0 < x ≤ 10 (a 1000 % change): beyond that nothing could ever be flagged."""
MAX_RESAMPLES = 20_000
"""Bootstrap resamples are 100 ≤ x ≤ 20000 (memory grows with resamples × samples per run)."""


class Settings(BaseModel):
    threshold: float = 0.05
    energy_threshold: float = 0.05
    confidence: float = 0.95
    resamples: int = 5000
    seed: int = 0
    phase: str = "e2e"


class Latency(BaseModel):
    baseline_p50_ms: float
    candidate_p50_ms: float
    relative_change: float
    ci_low: float | None
    ci_high: float | None
    noise: float = Field(default=0.0, description="the runs' own drift, by which the interval was widened")
    verdict: Verdict


class Energy(BaseModel):
    baseline_j_per_action: float | None
    candidate_j_per_action: float | None
    relative_change: float | None
    verdict: Verdict
    note: str = ""


class Match(BaseModel):
    config_hash: str
    label: str
    baseline: str
    candidate: str
    latency: Latency | None
    energy: Energy
    correctness_regressed: bool
    candidate_invalid_reason: str | None = None

    @property
    def regressed(self) -> bool:
        latency = self.latency is not None and self.latency.verdict == "regression"
        return latency or self.energy.verdict == "regression" or self.correctness_regressed


class Report(BaseModel):
    settings: Settings
    matches: list[Match]
    only_baseline: list[str]
    only_candidate: list[str]
    skipped: list[str]

    @property
    def regressions(self) -> list[Match]:
        return [match for match in self.matches if match.regressed]


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


def latency_change(baseline: RunResult, candidate: RunResult, settings: Settings) -> Latency | None:
    base = baseline.timing.samples_ms.get(settings.phase)
    cand = candidate.timing.samples_ms.get(settings.phase)
    if not base or not cand:
        return None
    base_p50, cand_p50 = float(np.median(base)), float(np.median(cand))
    if len(base) < 2 or len(cand) < 2:
        change = (cand_p50 - base_p50) / base_p50
        return Latency(
            baseline_p50_ms=base_p50,
            candidate_p50_ms=cand_p50,
            relative_change=change,
            ci_low=None,
            ci_high=None,
            verdict="too few samples",
        )
    point, low, high = bootstrap_relative_median_change(
        base, cand, settings.confidence, settings.resamples, settings.seed
    )
    noise = math.hypot(drift(base), drift(cand))
    low, high = low - noise, high + noise
    if low > 0 and point > settings.threshold:
        verdict: Verdict = "regression"
    elif high < 0 and point < -settings.threshold:
        verdict = "improvement"
    else:
        verdict = "unchanged"
    return Latency(
        baseline_p50_ms=base_p50,
        candidate_p50_ms=cand_p50,
        relative_change=point,
        ci_low=low,
        ci_high=high,
        noise=noise,
        verdict=verdict,
    )


def energy_change(baseline: RunResult, candidate: RunResult, settings: Settings) -> Energy:
    base, cand = baseline.energy, candidate.energy
    if base is None or cand is None:
        return Energy(baseline_j_per_action=None, candidate_j_per_action=None, relative_change=None, verdict="no data")
    values = {"baseline_j_per_action": base.joules_per_action, "candidate_j_per_action": cand.joules_per_action}
    if (base.label, base.method) != (cand.label, cand.method):
        note = f"{base.label} {base.method} vs {cand.label} {cand.method}"
        return Energy(**values, relative_change=None, verdict="not comparable", note=note)
    if base.joules_per_action <= 0:  # the reader lets 0 J through (non-negative); a relative change of it is none
        note = f"baseline {base.joules_per_action:g} J per action: no relative change"
        return Energy(**values, relative_change=None, verdict="not comparable", note=note)
    change = (cand.joules_per_action - base.joules_per_action) / base.joules_per_action
    verdict: Verdict = "unchanged"
    if change > settings.energy_threshold:
        verdict = "regression"
    elif change < -settings.energy_threshold:
        verdict = "improvement"
    return Energy(**values, relative_change=change, verdict=verdict, note=base.label)


def run_label(result: RunResult) -> str:
    parts = [result.model.name, result.device.profile, result.backend, result.precision]
    optimization = result.optimization
    if optimization and optimization.dp_cache:
        parts.append("dp-cache {" + ",".join(map(str, optimization.dp_cache.computed)) + "}")
    if optimization and optimization.fuse_expert_kv:
        parts.append("fuse-expert-kv")
    return " ".join(parts)


def _latest_by_identity(folder: Path) -> tuple[dict[str, tuple[Path, RunResult]], list[str]]:
    loaded, skipped = load_results([folder])
    latest: dict[str, tuple[Path, RunResult]] = {}
    for path, result in sorted(loaded, key=lambda item: item[1].finished_utc):
        latest[result.config_hash] = (path, result)
    return latest, skipped


def check_settings(settings: Settings) -> None:
    """Refuse settings that would skip or falsify the check: a NaN threshold never flags, an unknown phase compares
    nothing (and would exit 0), an absurd resample count exhausts memory. Each problem names its flag."""
    for name, value in (("threshold", settings.threshold), ("energy-threshold", settings.energy_threshold)):
        if not (math.isfinite(value) and 0 < value <= MAX_THRESHOLD):
            raise InputError(f"--{name} must be a finite number with 0 < x ≤ {MAX_THRESHOLD:g}, not {value}")
    if not (math.isfinite(settings.confidence) and 0 < settings.confidence < 1):
        raise InputError(f"--confidence must be between 0 and 1 (exclusive), not {settings.confidence}")
    if not 100 <= settings.resamples <= MAX_RESAMPLES:
        raise InputError(f"--resamples must be within 100 ≤ x ≤ {MAX_RESAMPLES}, not {settings.resamples}")
    if not 0 <= settings.seed < SEED_LIMIT:
        raise InputError(f"--seed must be within 0 ≤ x < 2**63, not {settings.seed}")
    if settings.phase not in Phase.RECORDED and not re.fullmatch(r"denoise_step\[\d+\]", settings.phase):
        raise unknown_name("phase", settings.phase, Phase.RECORDED)


def compare_folders(baseline: Path, candidate: Path, settings: Settings) -> Report:
    """Every run of the candidate folder against the baseline run of the same config identity (the latest one)."""
    check_settings(settings)
    base_runs, base_skipped = _latest_by_identity(baseline)
    cand_runs, cand_skipped = _latest_by_identity(candidate)
    matches = []
    for key in sorted(base_runs.keys() & cand_runs.keys(), key=lambda k: run_label(cand_runs[k][1])):
        (base_path, base), (cand_path, cand) = base_runs[key], cand_runs[key]
        matches.append(
            Match(
                config_hash=key,
                label=run_label(cand),
                baseline=str(base_path),
                candidate=str(cand_path),
                latency=latency_change(base, cand, settings),
                energy=energy_change(base, cand, settings),
                correctness_regressed=base.valid and not cand.valid,
                candidate_invalid_reason=cand.invalid_reason,
            )
        )
    return Report(
        settings=settings,
        matches=matches,
        only_baseline=sorted(f"{run_label(r)} ({p})" for k, (p, r) in base_runs.items() if k not in cand_runs),
        only_candidate=sorted(f"{run_label(r)} ({p})" for k, (p, r) in cand_runs.items() if k not in base_runs),
        skipped=[*base_skipped, *cand_skipped],
    )
