"""The result of robots served by a remote policy server (``run --remote``): the server's baseline result (its own
timed pass, energy and hardware) with the robots' serving block, gated and costed for the robots' control rate and
execution model, the server's hour and energy shared by the robots it served."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from vlabench.analysis.cet import ExecutionModel, cost_report
from vlabench.config import RunConfig
from vlabench.results.assemble import control_verdict, served_energy
from vlabench.results.schema import RunResult
from vlabench.results.serving import ServingResult


def offload_result(
    baseline: RunResult, serving: ServingResult, config: RunConfig, execution: ExecutionModel, client: str
) -> RunResult:
    """A new result (its own id and times) assembled from the server's baseline and what the robots measured."""
    finished = datetime.now(timezone.utc)
    energy = baseline.energy
    if energy is not None:
        rows = execution.actions_per_inference * baseline.workload.batch
        energy = energy.model_copy(update={"joules_per_action": energy.joules_per_inference / rows})
    served = served_energy(serving, energy, execution)
    cost = baseline.cost
    if cost is not None and energy is not None:
        cost = cost_report(
            price_usd=cost.price_usd,
            price_source=cost.price_source,
            price_estimate=cost.price_estimate,
            joules_per_inference=energy.joules_per_inference,
            idle_w=energy.idle_w,
            energy_label=energy.label,
            latency_p50_ms=serving.latency.p50,
            control_hz=config.control_hz,
            execution=execution,
            assumptions=cost.assumptions,
            robots_per_device=serving.robots,
            rows_per_inference=serving.mean_batch,
        )
    run_config = baseline.config.model_copy(
        update={
            "remote": config.remote,
            "robots": serving.robots,
            "serve_duration_s": config.serve_duration_s,
            "request_timeout_s": config.request_timeout_s,
            "execution": config.execution,
            "control_hz": config.control_hz,
            "actions_per_chunk": config.actions_per_chunk,
            "seed": config.seed,
        }
    )
    note = (
        f"offload: {serving.robots} robot(s) on {client} served over gRPC by {serving.server}; the phases and "
        "energy are the server's own timed pass, the serving block what the robots measured"
    )
    return baseline.model_copy(
        update={
            "run_id": uuid.uuid4().hex,
            "started_utc": finished - timedelta(seconds=serving.duration_s),
            "finished_utc": finished,
            "config": run_config,
            "control": control_verdict(serving.latency, config.control_hz, execution),
            "energy": energy,
            "cost": cost,
            "serving": served,
            "warnings": [*baseline.warnings, note],
        }
    )
