"""Dispatching sweep runs to a Ray cluster whose nodes advertise their devices as custom resources.

A run needing device D requests ``{"vlabench-device:D": 1}``; each node holds one unit per device, so a device runs
one benchmark at a time. ``RayTask`` is the run package's ``Launcher`` for a run on the node holding its device: the
remote task runs the same ``Subprocess`` launch as a local sweep and returns its outcome as JSON; the driver's sweep
(``execute_sweep``, ``RAY_IN_FLIGHT`` runs at once) validates the result and writes it into its own results
folder."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from vlabench.commands.run import ConfiguredRun, Subprocess
from vlabench.config import RunConfig
from vlabench.errors import InputError, UnavailableError
from vlabench.fleet.sweep_file import PLACEMENT_PREFIX, SweepRun
from vlabench.results.launch_outcome import LaunchOutcome


def remote_run(settings: dict[str, Any], timeout_s: float | None) -> str:
    """Executed on a Ray node: one ``Subprocess`` launch; returns its LaunchOutcome as JSON, with the node id."""
    import ray

    outcome = Subprocess(timeout_s).launch([ConfiguredRun(RunConfig.model_validate(settings))])
    outcome.node_id = ray.get_runtime_context().get_node_id()
    return outcome.model_dump_json()


@dataclass(frozen=True)
class RayTask:
    """The launcher of a run on a Ray node holding its device (``run.resource``, one of ``devices``, those the
    cluster's live nodes advertise), through a connected ``ray`` module; ``launch`` waits for its run, so a sweep
    keeps several in flight from several threads."""

    ray: Any
    timeout_s: float | None
    max_retries: int
    devices: frozenset[str] = frozenset()
    task: Any = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", self.ray.remote(remote_run))

    def submit(self, run: SweepRun) -> Any:
        options = {"resources": {run.resource: 1}, "num_cpus": 0, "max_retries": self.max_retries}
        return self.task.options(**options).remote(run.config.model_dump(mode="json"), self.timeout_s)

    def collect(self, task: Any) -> LaunchOutcome:
        try:
            return LaunchOutcome.model_validate_json(self.ray.get(task))
        except self.ray.exceptions.RayError as exc:
            reason = f"the Ray task failed after {self.max_retries} retries: {type(exc).__name__}: {exc}"
            return LaunchOutcome(status="failed", reason=reason.splitlines()[0], wall_s=0.0, hostname="")

    def launch(self, runs: Sequence[SweepRun]) -> LaunchOutcome:
        if len(runs) != 1:
            raise ValueError(f"a Ray task runs one config, not {len(runs)}")
        run = runs[0]
        if run.resource not in self.devices:
            reason = f"no live node of the Ray cluster advertises {run.resource}"
            return LaunchOutcome(status="failed", reason=reason, wall_s=0.0, hostname="")
        return self.collect(self.submit(run))


RAY_IN_FLIGHT = 256
"""Runs a sweep keeps submitted to a cluster at once (each waited on by a thread of the driver); Ray starts each when
a node holding its device is free."""
CONNECT_TIMEOUT_S = 5.0
"""How long the cluster's address may take to accept a TCP connection (``ray.init`` itself waits far longer)."""


def probe_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, naming the address, a Ray address that does not accept a TCP connection within ``timeout_s``:
    ``ray.init`` would wait minutes on it. ``auto`` and ``local`` (found or started by Ray itself) are not probed."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # [IPv6]:port
    if not host or not port.isdigit() or not 0 < int(port) < 65_536:
        raise InputError(f"--ray {address}: expected HOST:PORT (or ray://HOST:PORT), e.g. 10.0.0.1:6379")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = f"no answer within {timeout_s:g} s" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise UnavailableError(
            f"cannot reach the Ray cluster at {address} ({reason}): is its head node running (`vlabench worker "
            "--start` there) and the port open from here?"
        ) from None


def _connect(address: str) -> Any:
    probe_address(address)
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


@contextmanager
def ray_launcher(address: str, timeout_s: float | None, max_retries: int) -> Iterator[RayTask]:
    """A ``RayTask`` launcher connected to the cluster at ``address`` (an address that does not answer is refused
    now, before any run), disconnected on leaving."""
    ray = _connect(address)
    try:
        yield RayTask(ray, timeout_s, max_retries, frozenset(cluster_devices(ray)))
    finally:
        ray.shutdown()
