"""Dispatching sweep runs to a Ray cluster whose nodes advertise their devices as custom resources.

A run needing device D requests ``{"vlabench-device:D": 1}``; each node holds one unit per device, so a device runs
one benchmark at a time. The remote task runs the same child process as a local sweep and returns the result JSON
text; the driver validates it and writes it into its own results folder."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from vlabench.config import RunConfig
from vlabench.errors import UnavailableError
from vlabench.fleet.local_runner import ChildOutcome, Dispatch, RunRecord, SweepStore, run_child
from vlabench.fleet.sweep_file import PLACEMENT_PREFIX, SweepRun


def remote_run(settings: dict[str, Any], timeout_s: float | None) -> str:
    """Executed on a Ray node: one child ``vlabench run``; returns the ChildOutcome as JSON, with the node id."""
    import ray

    outcome = run_child(RunConfig.model_validate(settings), timeout_s)
    outcome.node_id = ray.get_runtime_context().get_node_id()
    return outcome.model_dump_json()


def _connect(address: str) -> Any:
    try:
        import ray
    except ImportError:
        raise UnavailableError("--ray needs Ray: pip install -e '.[ray]'") from None
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UnavailableError(f"cannot connect to the Ray cluster at {address}: {exc}") from None
    return ray


def cluster_devices(ray: Any) -> set[str]:
    """The vlabench-device resources the cluster's live nodes advertise."""
    return {
        name
        for node in ray.nodes()
        if node.get("Alive")
        for name in node["Resources"]
        if name.startswith(PLACEMENT_PREFIX)
    }


def run_on_ray(address: str, timeout_s: float | None, max_retries: int) -> Dispatch:
    """A dispatcher that submits every pending run at once and records each as it finishes."""

    def dispatch(
        runs: list[SweepRun],
        store: SweepStore,
        started: Callable[[SweepRun], None],
        finished: Callable[[RunRecord], None],
    ) -> None:
        ray = _connect(address)
        try:
            task = ray.remote(remote_run)
            available = cluster_devices(ray)
            pending = {}
            for run in runs:
                if run.resource not in available:
                    reason = f"no live node of the Ray cluster advertises {run.resource}"
                    finished(store.finish(run, ChildOutcome(status="failed", reason=reason, wall_s=0.0, hostname="")))
                    continue
                options = {"resources": {run.resource: 1}, "num_cpus": 0, "max_retries": max_retries}
                pending[task.options(**options).remote(run.config.model_dump(mode="json"), timeout_s)] = run
                started(run)
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                run = pending.pop(done[0])
                try:
                    outcome = ChildOutcome.model_validate_json(ray.get(done[0]))
                except ray.exceptions.RayError as exc:
                    reason = f"the Ray task failed after {max_retries} retries: {type(exc).__name__}: {exc}"
                    outcome = ChildOutcome(status="failed", reason=reason.splitlines()[0], wall_s=0.0, hostname="")
                finished(store.finish(run, outcome))
        finally:
            ray.shutdown()

    return dispatch
