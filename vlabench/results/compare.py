"""``vlabench compare``: match two results folders run by run and flag latency, energy and correctness regressions.

Runs are matched by configuration identity (``config_hash``); every run of a configuration in a folder counts, so a
folder may hold interleaved repeats. Latency: ``compare_latency`` (typical and least disturbed runs, a bootstrap
widened by the runs' own drift, the minimum detectable change, the runs' background load as caveats). Energy results
hold one window and no dispersion, so joules per action regress when they grow by more than their own relative
threshold (the latest run of each side). Correctness regresses when the latest baseline run is valid and the latest
candidate run is not (a NaN action error included); the match keeps the candidate's reason."""

from __future__ import annotations

import math
import re
from pathlib import Path

from pydantic import BaseModel, Field

from vlabench.config import SEED_LIMIT
from vlabench.errors import InputError, unknown_name
from vlabench.results.aggregate import load_results
from vlabench.results.compare_latency import Latency, Verdict, latency_change
from vlabench.results.schema import RunResult
from vlabench.vocab import Phase

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


class Energy(BaseModel):
    baseline_j_per_action: float | None
    candidate_j_per_action: float | None
    relative_change: float | None
    verdict: Verdict
    note: str = ""


class Match(BaseModel):
    config_hash: str
    label: str
    baseline: str = Field(description="the latest baseline run's file")
    candidate: str
    baseline_runs: list[str] = Field(default_factory=list, description="every baseline run's file, oldest first")
    candidate_runs: list[str] = Field(default_factory=list)
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


Runs = list[tuple[Path, RunResult]]


def _runs_by_identity(folder: Path) -> tuple[dict[str, Runs], list[str]]:
    """Every run of each configuration in ``folder``, oldest first, and the files skipped."""
    loaded, skipped = load_results([folder])
    grouped: dict[str, Runs] = {}
    for path, result in sorted(loaded, key=lambda item: item[1].started_utc):
        grouped.setdefault(result.config_hash, []).append((path, result))
    return grouped, skipped


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


def compare_runs(baseline: Runs, candidate: Runs, settings: Settings) -> Match:
    """One configuration's runs in each folder, compared (latency over all of them; energy and correctness of the
    latest of each)."""
    (base_path, base), (cand_path, cand) = baseline[-1], candidate[-1]
    latency = latency_change(
        [result for _, result in baseline],
        [result for _, result in candidate],
        threshold=settings.threshold,
        confidence=settings.confidence,
        resamples=settings.resamples,
        seed=settings.seed,
        phase=settings.phase,
    )
    return Match(
        config_hash=cand.config_hash,
        label=run_label(cand),
        baseline=str(base_path),
        candidate=str(cand_path),
        baseline_runs=[str(path) for path, _ in baseline],
        candidate_runs=[str(path) for path, _ in candidate],
        latency=latency,
        energy=energy_change(base, cand, settings),
        correctness_regressed=base.valid and not cand.valid,
        candidate_invalid_reason=cand.invalid_reason,
    )


def compare_folders(baseline: Path, candidate: Path, settings: Settings) -> Report:
    """Every configuration of the candidate folder against the same configuration's runs in the baseline folder."""
    check_settings(settings)
    base_runs, base_skipped = _runs_by_identity(baseline)
    cand_runs, cand_skipped = _runs_by_identity(candidate)
    shared = sorted(base_runs.keys() & cand_runs.keys(), key=lambda key: run_label(cand_runs[key][-1][1]))

    def unmatched(runs: dict[str, Runs], other: dict[str, Runs]) -> list[str]:
        return sorted(f"{run_label(r)} ({p})" for key, group in runs.items() if key not in other for p, r in group)

    return Report(
        settings=settings,
        matches=[compare_runs(base_runs[key], cand_runs[key], settings) for key in shared],
        only_baseline=unmatched(base_runs, cand_runs),
        only_candidate=unmatched(cand_runs, base_runs),
        skipped=[*base_skipped, *cand_skipped],
    )
