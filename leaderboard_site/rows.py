"""Leaderboard rows: result files through ``results.aggregate`` and ``analysis.cet``, plus reported rows."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from vlabench.analysis.cet import CostAssumptions
from vlabench.analysis.served_cost import COLUMNS as SERVED_COLUMNS
from vlabench.backends import BACKENDS
from vlabench.errors import InputError
from vlabench.hardware.devices import load_device_profile
from vlabench.results.aggregate import results_frame
from vlabench.results.schema import RunResult
from vlabench.results.task_success_rows import success_fields
from vlabench.vocab import Phase

PROVENANCE = ("measured", "estimated", "projected", "reported")
FRAME_KEYS = (
    *("model", "device", "backend", "precision", "cameras", "steps", "actions_per_chunk", "latency_p50_ms"),
    *("latency_p99_ms", "memory_needed_gb", "device_memory_gb", "energy_label", "valid", "invalid_reason"),
    *("action_error", "approximate", "chunk", "device_memory_nameplate_gb", "joules_per_inference", "idle_w"),
    *("price_usd", "lifetime_years", "duty_cycle", "electricity_usd_per_kwh"),
    *("batch", "serving", "robots_per_device", "rows_per_inference", "execution"),
    *SERVED_COLUMNS.values(),
)
"""The columns of ``aggregate.results_frame`` a site row keeps (the CET figures are recomputed at ranking)."""


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
    """One leaderboard row per configuration (the workload knobs, and for served and offload runs the robots, the
    largest batch and the execution model they asked under); the latest run of each wins."""
    w, served = result.workload, result.serving
    serving = (served.robots, served.max_batch, served.execution, result.control.actions_per_chunk) if served else ()
    return (
        result.model.name,
        result.device.profile,
        result.backend,
        result.precision,
        optimizations(result),
        w.cameras,
        w.steps,
        w.language_tokens,
        w.actions_per_chunk,
        w.batch,
        deployment(result),
        *serving,
    )


def deployment(result: RunResult) -> str:
    """Where the policy ran for the robot: ``on-robot`` (one robot, or a batch of robots' observations), ``served``
    (several robots by one instance on the device) or ``offload`` (robots sending their observations over the
    network to a server): offload rows rank beside on-robot rows, the server's hour shared by its robots."""
    served = result.serving
    if served is None:
        return "on-robot"
    return "offload" if served.transport == "grpc" else "served"


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


def software_stack(result: RunResult) -> str:
    """The runtime that executed the run and its version, as MLPerf and ML.ENERGY list it: the backend's
    ``runtime_library`` (the backend's own name for one no longer registered)."""
    backend = BACKENDS.get(result.backend)
    runtime = backend.runtime_library if backend else result.backend
    version = result.provenance.libraries.get(runtime)
    return f"{runtime} {version}" if version else runtime


def device_class(name: str) -> str | None:
    """The profile's device class (``jetson``, ``datacenter-gpu``...), None for a device no profile describes."""
    try:
        return load_device_profile(name).device_class
    except InputError:
        return None


def phase_figures(phases: dict[str, Any]) -> dict[str, list[float]]:
    """p50 and p99 of vision, prefill and action (the site's phase bars), for the phases a result has."""
    return {name: [phases[name].p50, phases[name].p99] for name in Phase.END_TO_END_PARTS if name in phases}


def serving_note(result: RunResult) -> str | None:
    """How a served or offload row was measured: its robots, batches, execution and control rate, and the server."""
    served = result.serving
    if served is None:
        return None
    where = f"over gRPC by {served.server}" if served.transport == "grpc" else "by one instance in the same process"
    execution = (
        "per step"
        if served.execution == "per-step"
        else f"{served.execution}, {result.control.actions_per_chunk} actions per chunk"
    )
    return (
        f"{served.robots} robots served {where}, batches of up to {served.max_batch} (mean {served.mean_batch:.3g}); "
        f"they asked at {result.control.control_hz:g} Hz, {execution}"
    )


def run_rows(runs: list[Run], control_hz: float, successes: dict | None = None) -> list[dict[str, Any]]:
    """Unranked rows of measured runs (``aggregate.results_frame``; ``cet.rank`` regates them), with the task success
    a fidelity artifact measured for the same configuration (``results.task_success_rows``; ``successes``: its
    ``cells``)."""
    if not runs:
        return []
    by_file = {str(run.path): run for run in runs}
    frame = results_frame([(r.path, r.result) for r in runs], control_hz)
    rows = []
    for record in frame.to_dict(orient="records"):
        row = {key: clean(value) for key, value in record.items() if key in FRAME_KEYS}
        run = by_file[record["file"]]
        result = run.result
        cost = result.cost
        row.update(
            id=run.slug,
            file=str(run.path),
            kind="run",
            run_id=result.run_id,
            device_kind=result.device.kind,
            device_class=device_class(result.device.profile),
            prompt_tokens=result.workload.language_tokens,
            phases=phase_figures(result.timing.phases),
            deployment=deployment(result),
            robots=result.serving.robots if result.serving else result.workload.batch,
            serving_note=serving_note(result),
            measured_control_hz=result.control.control_hz if result.serving else None,
            offload_server=result.serving.server if result.serving and result.serving.transport == "grpc" else None,
            optimizations=optimizations(result),
            provenance=provenance(result),
            group="approximate" if row["approximate"] else "exact",
            action_error_note=action_error_note(result),
            page=f"runs/{run.slug}.html",
            model_page=f"models/{slug(result.model.name)}.html",
            device_page=f"devices/{slug(result.device.profile)}.html",
            stack=software_stack(result),
            date=result.started_utc.strftime("%Y-%m-%d"),
            vlabench_version=result.provenance.vlabench_version,
            price_source=cost.price_source if cost else None,
            source=None,
            published_energy_kj=None,
            error_band=None,
            error_band_label=None,
            p99_note=None,
        )
        row.update(success_fields(result, successes or {}))
        rows.append(row)
    return rows


def cost_inputs(
    joules_per_inference: float | None,
    idle_w: float | None,
    price_usd: float | None,
    price_source: str | None,
    assumptions: CostAssumptions,
) -> dict[str, Any]:
    """``cet.COST_INPUTS`` (and the price's source): what ``cet.rank`` and the page's script recompute energy and
    cost per action from, at any target and execution model."""
    return {
        "joules_per_inference": joules_per_inference,
        "idle_w": idle_w,
        "price_usd": price_usd,
        "price_source": price_source,
        **assumptions.model_dump(),
    }
