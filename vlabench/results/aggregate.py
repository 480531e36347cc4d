"""Results folders -> one pandas table (the input of ranking, comparison and the leaderboard)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from vlabench.analysis.cet import cost_report
from vlabench.errors import InputError
from vlabench.results.header import RUN_KIND
from vlabench.results.schema import RunResult, load_result, result_from_document
from vlabench.results.store import json_files, survey


def load_results(paths: Iterable[Path]) -> tuple[list[tuple[Path, RunResult]], list[str]]:
    """Every run result (``kind: run``, or a schema-1.0 file) under the given files or folders, whatever the files
    are named. Other artifacts (profiles, loops, ...) and Chrome traces are passed over quietly; unreadable, invalid,
    physically impossible and foreign JSON files are skipped with a reason, and so are links, FIFOs and devices
    inside a folder (never followed or opened for reading). A file given by name is read as a run result."""
    loaded, skipped = [], []
    for root in paths:
        if not root.is_dir() and os.path.lexists(root):
            try:
                loaded.append((root, load_result(root)))
            except InputError as exc:
                skipped.append(str(exc))
            continue
        for path in json_files(root):
            found = survey(path, RUN_KIND)
            if found.error is not None:
                skipped.append(str(found.error))
            elif found.claims_run:
                try:
                    loaded.append((path, result_from_document(path, found.data)))
                except InputError as exc:
                    skipped.append(str(exc))
            elif found.foreign:
                skipped.append(f"{path}: not a vlabench artifact (no kind)")
    return loaded, skipped


def results_frame(results: list[tuple[Path, RunResult]], control_hz: float) -> pd.DataFrame:
    """One row per run; cost is recomputed at ``control_hz`` from the stored energy, latency and price."""
    rows = []
    for path, result in results:
        e2e = result.timing.phases["e2e"]
        energy, cost = result.energy, result.cost
        full_cost = electricity_only = None
        if energy is not None and cost is not None:
            recomputed = cost_report(
                price_usd=cost.price_usd,
                price_source=cost.price_source,
                price_estimate=cost.price_estimate,
                joules_per_inference=energy.joules_per_inference,
                idle_w=energy.idle_w,
                energy_label=energy.label,
                latency_p50_ms=e2e.p50,
                actions_per_chunk=result.workload.actions_per_chunk,
                control_hz=control_hz,
                assumptions=cost.assumptions,
            )
            if recomputed.basis == "hardware+electricity":
                full_cost = recomputed.usd_per_million_actions
            else:
                electricity_only = recomputed.usd_per_million_actions
        rows.append(
            {
                "model": result.model.name,
                "device": result.device.profile,
                "backend": result.backend,
                "precision": result.precision,
                "cameras": result.workload.cameras,
                "steps": result.workload.steps,
                "actions_per_chunk": result.workload.actions_per_chunk,
                "latency_p50_ms": e2e.p50,
                "latency_p99_ms": e2e.p99,
                "action_hz_p99": result.workload.actions_per_chunk * 1000.0 / e2e.p99,
                "memory_needed_gb": result.memory.estimated_total_bytes / 1e9,
                "device_memory_gb": result.device.memory_gb,
                "joules_per_action": energy.joules_per_action if energy else None,
                "energy_label": energy.label if energy else None,
                "usd_per_million_actions": full_cost,
                "usd_per_million_actions_electricity_only": electricity_only,
                "valid": result.valid,
                "invalid_reason": result.invalid_reason,
                "action_error": result.correctness.relative_error if result.correctness else None,
                "file": str(path),
            }
        )
    return pd.DataFrame(rows)
