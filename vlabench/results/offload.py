"""The result of robots served by a remote policy server (``run --remote``): the server's baseline result (its own
timed pass, energy and hardware, as its ``Describe`` shows them) with the robots' serving block, gated and costed for
the robots' control rate and execution model. The window's energy is the server's energy-pass power over each batch
that served these robots and its idle power between them; the server's hour and that energy are shared by the robots
it served. Provenance is the robots' host's (the server withholds its own)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from vlabench.analysis.cet import CostReport, ExecutionModel
from vlabench.config import RunConfig
from vlabench.results.assemble import control_verdict
from vlabench.results.schema import RunResult
from vlabench.results.serving import ServingResult, serving_warnings
from vlabench.results.serving_energy import Pricing, modelled_joules, served_cost, with_energy

ENERGY_METHOD = "the server's energy-pass power over each batch's time, its idle power between batches"


def offload_served(
    baseline: RunResult, serving: ServingResult, config: RunConfig, execution: ExecutionModel
) -> tuple[ServingResult, CostReport | None]:
    """The serving block with its window's energy (from the server's energy pass), and its cost."""
    energy, cost = baseline.energy, baseline.cost
    if energy is None:
        return serving, None
    joules = modelled_joules(serving, energy.average_w, energy.idle_w)
    serving = with_energy(serving, label="estimated", method=ENERGY_METHOD, joules=joules, idle_w=energy.idle_w)
    if cost is None:
        return serving, None
    return serving, served_cost(serving, Pricing.of(cost), config.control_hz, execution)


def offload_result(
    baseline: RunResult, serving: ServingResult, config: RunConfig, execution: ExecutionModel, client: str
) -> RunResult:
    """A new result (its own id and times) assembled from the server's baseline and what the robots measured."""
    finished = datetime.now(timezone.utc)
    energy = baseline.energy
    if energy is not None:
        rows = execution.actions_per_inference * baseline.workload.batch
        energy = energy.model_copy(update={"joules_per_action": energy.joules_per_inference / rows})
    serving, cost = offload_served(baseline, serving, config, execution)
    run_config = baseline.config.model_copy(
        update={
            name: getattr(config, name)
            for name in (
                *("remote", "robots", "max_robots", "arrivals", "serve_duration_s", "request_timeout_s"),
                *("connect_timeout_s", "encoding", "jpeg_quality", "link", "execution", "control_hz"),
                *("actions_per_chunk", "seed", "out", "tls_ca", "tls_cert", "tls_key", "token_file"),
            )
        }
        | {"robots": serving.robots if config.robots != "auto" else "auto"}
    )
    note = (
        f"offload: {serving.robots} robot(s) on {client} served over gRPC by {serving.server}; the phases are the "
        "server's own timed pass, the serving block what the robots measured, the provenance the robots' host's"
    )
    partial = serving.status == "partial"
    return baseline.model_copy(
        update={
            "run_id": uuid.uuid4().hex,
            "status": "partial" if partial else "complete",
            "partial_reason": serving.stopped if partial else None,
            "started_utc": finished - timedelta(seconds=serving.duration_s),
            "finished_utc": finished,
            "config": run_config,
            "control": control_verdict(serving.latency, config.control_hz, execution),
            "energy": energy,
            "cost": cost,
            "serving": serving,
            "warnings": [*baseline.warnings, *serving_warnings(serving), note],
        }
    )
