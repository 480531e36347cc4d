"""Leaderboard rows: result files through ``results.aggregate`` and ``analysis.cet``, plus reported rows."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from vlabench.analysis.cet import Priority, rank
from vlabench.errors import InputError
from vlabench.hardware.devices import load_device_profile
from vlabench.results.aggregate import results_frame
from vlabench.results.schema import RunResult

from .reported import ReportedEntry

PROVENANCE = ("measured", "estimated", "projected", "reported")


@dataclass(frozen=True)
class Run:
    """A loaded result with the names the site gives its pages; ``named``: its file was named as an input (a link
    named so is followed), not found inside an input folder (where links are never followed)."""

    path: Path
    result: RunResult
    slug: str
    named: bool = False

    @property
    def trace_path(self) -> Path:
        return self.path.with_name(self.path.name.removesuffix(".json") + ".trace.json")


def slug(text: str) -> str:
    """A file-name-safe, collision-free name for any string (names come from result files)."""
    readable = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")[:24] or "x"
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def optimizations(result: RunResult) -> str:
    """The action-expert optimizations and fused variants a run used, or 'none'."""
    parts = []
    if result.optimization and result.optimization.dp_cache:
        parts.append(f"DP-Cache {result.optimization.dp_cache.label()}")
    if result.optimization and result.optimization.fuse_expert_kv:
        parts.append("fuse-expert-kv")
    if result.config.fuse_denoise_loop:
        parts.append("fused denoise loop")
    return ", ".join(parts) or "none"


def provenance(result: RunResult) -> str:
    """Timing is always measured; a run whose energy (hence cost) is estimated says so."""
    return "estimated" if result.energy is not None and result.energy.label == "estimated" else "measured"


def row_key(result: RunResult) -> tuple:
    """One leaderboard row per configuration (the workload knobs included); the latest run of each wins."""
    w = result.workload
    return (
        result.model.name,
        result.device.profile,
        result.backend,
        result.precision,
        optimizations(result),
        w.cameras,
        w.steps,
        w.actions_per_chunk,
    )


def latest_per_configuration(runs: list[Run]) -> list[Run]:
    latest: dict[tuple, Run] = {}
    for run in sorted(runs, key=lambda r: r.result.started_utc):
        latest[row_key(run.result)] = run
    return list(latest.values())


def action_error_note(result: RunResult) -> str | None:
    """What the table shows for an action error that is no finite number (the figure itself is None in the table's
    JSON, which has no NaN): "NaN", "∞", or "not recorded" for older files that lost it."""
    error = result.correctness.relative_error if result.correctness else 0.0
    if error is None:
        return "not recorded"
    if math.isnan(error):
        return "NaN"
    return None if math.isfinite(error) else ("∞" if error > 0 else "−∞")


def clean(value: Any) -> Any:
    """JSON-safe: NaN/NA to None, numpy scalars to Python."""
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def run_rows(runs: list[Run], priority: Priority, control_hz: float) -> list[dict[str, Any]]:
    """Ranked rows (feasible first, by priority) from ``cet.rank`` over ``aggregate.results_frame``."""
    if not runs:
        return []
    by_file = {str(run.path): run for run in runs}
    ranked = rank(results_frame([(r.path, r.result) for r in runs], control_hz), priority, control_hz)
    rows = []
    for record in ranked.to_dict(orient="records"):
        row = {key: clean(value) for key, value in record.items()}
        run = by_file[row.pop("file")]
        result = run.result
        e2e = result.timing.phases["e2e"]
        energy, cost = result.energy, result.cost
        row.update(
            id=run.slug,
            kind="run",
            run_id=result.run_id,
            device_kind=result.device.kind,
            optimizations=optimizations(result),
            provenance=provenance(result),
            inference_hz_p50=1000.0 / e2e.p50,
            action_error_note=action_error_note(result),
            rank=None if row["rank"] is None else int(row["rank"]),
            page=f"runs/{run.slug}.html",
            model_page=f"models/{slug(result.model.name)}.html",
            device_page=f"devices/{slug(result.device.profile)}.html",
            cost_inputs=None
            if energy is None or cost is None
            else {
                "price_usd": cost.price_usd,
                "joules_per_inference": energy.joules_per_inference,
                "idle_w": energy.idle_w,
                "lifetime_years": cost.assumptions.lifetime_years,
                "duty_cycle": cost.assumptions.duty_cycle,
                "electricity_usd_per_kwh": cost.assumptions.electricity_usd_per_kwh,
            },
            source=None,
            published_energy_kj=None,
        )
        rows.append(row)
    return rows


def _profile_kind(device: str) -> str | None:
    try:
        return load_device_profile(device).kind
    except InputError:
        return None


def reported_rows(entries: list[ReportedEntry]) -> list[dict[str, Any]]:
    """Published figures: never gated or ranked (no p99, memory or J per action is published)."""
    rows = []
    for entry in entries:
        latency, energy = entry.latency, entry.energy
        e2e = latency.phases_ms["e2e"]
        sources = [latency.source] + ([energy.source] if energy and energy.source not in latency.source else [])
        name = f"{latency.model} {latency.device} {latency.stack} {latency.precision} {latency.steps}"
        rows.append(
            {
                "id": slug("reported " + name),
                "kind": "reported",
                "run_id": None,
                "model": latency.model,
                "device": latency.device,
                "device_kind": _profile_kind(latency.device),
                "backend": latency.stack,
                "precision": latency.precision,
                "optimizations": "none",
                "cameras": latency.cameras,
                "steps": latency.steps,
                "actions_per_chunk": None,
                "latency_p50_ms": e2e,
                "latency_p99_ms": None,
                "inference_hz_p50": 1000.0 / e2e,
                "action_hz_p99": None,
                "memory_needed_gb": None,
                "device_memory_gb": None,
                "joules_per_action": None,
                "energy_label": None,
                "usd_per_million_actions": None,
                "usd_per_million_actions_electricity_only": None,
                "valid": True,
                "invalid_reason": None,
                "action_error": None,
                "action_error_note": None,
                "provenance": "reported",
                "feasible": None,
                "reasons": "published figure: not gated (no p99 latency or memory published)",
                "pareto": False,
                "rank": None,
                "page": None,
                "model_page": f"models/{slug(latency.model)}.html",
                "device_page": f"devices/{slug(latency.device)}.html",
                "cost_inputs": None,
                "source": "; ".join(sources),
                "assumed": list(latency.assumed),
                "published_energy_kj": energy.energy_kj if energy else None,
            }
        )
    return rows
