"""A sweep on a Ray cluster goes through the run package's launcher interface: ``execute_sweep`` calls
``RayTask.launch`` for each run, several in flight, each submitted with its device as the Ray resource (a stand-in
``ray`` module here; tests/test_ray_sweep.py runs a real cluster)."""

from __future__ import annotations

import threading

import yaml

from vlabench.fleet.local_runner import execute_sweep
from vlabench.fleet.ray_dispatch import RayTask
from vlabench.fleet.sweep_file import expand, parse_sweep
from vlabench.results.launch_outcome import LaunchOutcome


class FakeRay:
    """Just what ``RayTask`` calls: ``remote``, ``options(...).remote(...)``, ``get`` and ``exceptions.RayError``;
    a task's outcome names the resource it was submitted with."""

    class exceptions:
        RayError = RuntimeError

    def __init__(self) -> None:
        self.submitted: list[dict] = []
        self.threads: set[str] = set()

    def remote(self, function):
        return FakeTask(self)

    def get(self, outcome: str) -> str:
        self.threads.add(threading.current_thread().name)
        return outcome


class FakeTask:
    def __init__(self, ray: FakeRay, options: dict | None = None) -> None:
        self.ray, self.chosen = ray, options or {}

    def options(self, **options) -> FakeTask:
        return FakeTask(self.ray, options)

    def remote(self, settings: dict, timeout_s: float | None) -> str:
        self.ray.submitted.append(self.chosen["resources"])
        reason = f"ran where {next(iter(self.chosen['resources']))} is"
        return LaunchOutcome(status="failed", reason=reason, wall_s=1.0, hostname="node").model_dump_json()


def test_a_ray_sweep_launches_each_run_through_ray_task(tmp_path):
    devices = [{"name": "cpu", "placement": label} for label in ("fake-a", "fake-b", "fake-c")]
    text = yaml.safe_dump({"fixed": {"model": "smolvla-tiny"}, "matrix": {"device": devices}})
    runs = expand(parse_sweep(text, "sweep.yaml"))
    ray = FakeRay()
    launcher = RayTask(ray, None, 0, frozenset({"vlabench-device:fake-a", "vlabench-device:fake-b"}))
    started = []
    records = {r.placement: r for r in execute_sweep(runs, tmp_path, launcher, started.append, in_flight=3)}
    assert len(started) == 3
    assert sorted(next(iter(resources)) for resources in ray.submitted) == [
        "vlabench-device:fake-a",
        "vlabench-device:fake-b",
    ]
    assert all(resources == {next(iter(resources)): 1} for resources in ray.submitted)
    assert records["fake-a"].reason == "ran where vlabench-device:fake-a is"
    assert records["fake-b"].reason == "ran where vlabench-device:fake-b is"
    assert records["fake-c"].reason == "no live node of the Ray cluster advertises vlabench-device:fake-c"
    assert all(name.startswith("vlabench-sweep") for name in ray.threads)  # waited on from the sweep's threads
