"""Results folders -> one pandas table (the input of ranking, comparison and the leaderboard)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from vlabench.analysis.cet import ExecutionModel, gate_rows, is_lossy
from vlabench.errors import InputError
from vlabench.results.header import RUN_KIND
from vlabench.results.schema import RunResult, load_result, result_from_document
from vlabench.results.store import json_files, survey


def load_results(
    paths: Iterable[Path], include_partial: bool = False
) -> tuple[list[tuple[Path, RunResult]], list[str]]:
    """Every run result (``kind: run``, or a schema-1.0 file) under the given files or folders, whatever the files
    are named. Other artifacts (profiles, loops, ...) and Chrome traces are passed over quietly; unreadable, invalid,
    physically impossible and foreign JSON files are skipped with a reason, and so are links, FIFOs and devices
    inside a folder (never followed or opened for reading), and partial results unless ``include_partial``. A file
    given by name is read as a run result."""
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
    if include_partial:
        return loaded, skipped
    partial = [(path, result) for path, result in loaded if result.status == "partial"]
    skipped += [
        f"{path}: a partial result ({result.partial_reason}); --include-partial keeps it" for path, result in partial
    ]
    return [entry for entry in loaded if entry[1].status != "partial"], skipped


def results_frame(
    results: list[tuple[Path, RunResult]], control_hz: float, execution: ExecutionModel | None = None
) -> pd.DataFrame:
    """One row per run, gated at ``control_hz`` under ``execution`` (None: each run's own execution model, per step
    for files older than schema 1.2); energy and cost per action are recomputed under that model from the stored
    energy, latency and price (``cet.gate_rows``). The input of ``cet.rank``, ``compare`` and the leaderboard.

    Columns:
    identity: model, device, backend, precision, cameras, steps, chunk (actions the model predicts), batch, file;
    serving: serving (None, "in-process" or "grpc": a served run's latencies are those its robots saw),
    robots_per_device and rows_per_inference (how many robots share the device, and how many per inference), and a
    served window's load (``analysis.served_cost.COLUMNS``: its energy and cost per robot are recomputed from it);
    control (``cet.gate``): execution ("per-step", "sync", "async"), actions_per_chunk (executed per inference: 1
    per step), latency_p50_ms, latency_p99_ms (the latency the gate judges: the upper end of p99's 95% interval, or
    the slowest sample with too few samples), inference_hz_p50, inference_hz_p99, reaction_ms (that latency),
    delivered_action_hz (at p50), delivered_action_hz_p99, meets_target, feasible, reasons;
    memory: memory_needed_gb (estimated), device_memory_gb (usable: what the OS and CUDA context leave on unified-
    memory devices), device_memory_nameplate_gb;
    energy and cost (None without an energy measurement): energy_label, joules_per_inference, joules_per_action,
    usd_per_million_actions (None without a purchase price), usd_per_million_actions_electricity_only, and the cost
    inputs idle_w, price_usd, lifetime_years, duty_cycle, electricity_usd_per_kwh;
    accuracy: valid, invalid_reason, action_error (relative, against the exact fp32 path: DP-Cache runs give the
    schedule's error, others the correctness gate's; None for the reference run), approximate (``cet.is_lossy``).
    """
    rows = [_row(path, result) for path, result in results]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return gate_rows(frame, control_hz, execution)


def _row(path: Path, result: RunResult) -> dict[str, Any]:
    served = result.serving
    e2e = result.robot_latency
    energy, cost, config = result.energy, result.cost, result.config
    control = result.control
    optimization = result.optimization
    dp_cache = optimization is not None and optimization.dp_cache is not None
    gate_error = result.correctness.relative_error if result.correctness else None
    action_error = gate_error
    if dp_cache and optimization.dp_cache_error is not None:
        action_error = optimization.dp_cache_error.relative
    assumptions = cost.assumptions if cost else None
    return {
        "model": result.model.name,
        "device": result.device.profile,
        "backend": result.backend,
        "precision": result.precision,
        "cameras": result.workload.cameras,
        "steps": result.workload.steps,
        "chunk": result.workload.chunk,
        "batch": result.workload.batch,
        "serving": served.transport if served else None,
        "robots_per_device": cost.robots_per_device if cost else 1.0,
        "rows_per_inference": cost.rows_per_inference if cost else 1.0,
        "execution": control.execution,
        "actions_per_chunk": control.actions_per_chunk,
        "latency_p50_ms": e2e.p50,
        "latency_p99_ms": e2e.judged_p99()[0],
        "memory_needed_gb": result.memory.estimated_total_bytes / 1e9,
        "device_memory_gb": result.device.usable_gb(),
        "device_memory_nameplate_gb": result.device.memory_gb,
        "energy_label": energy.label if energy else None,
        "joules_per_inference": energy.joules_per_inference if energy else None,
        "joules_per_action": None,
        "usd_per_million_actions": None,
        "usd_per_million_actions_electricity_only": None,
        "idle_w": energy.idle_w if energy else None,
        "price_usd": cost.price_usd if cost else result.device.price_usd,
        "lifetime_years": assumptions.lifetime_years if assumptions else config.lifetime_years,
        "duty_cycle": assumptions.duty_cycle if assumptions else config.duty_cycle,
        "electricity_usd_per_kwh": assumptions.electricity_usd_per_kwh if assumptions else config.usd_per_kwh,
        "valid": result.valid,
        "invalid_reason": result.invalid_reason,
        "action_error": action_error,
        "approximate": is_lossy(precision=result.precision, action_error=gate_error, dp_cache=dp_cache),
        "file": str(path),
        **(load.columns() if served and (load := served.load()) else {}),
    }
