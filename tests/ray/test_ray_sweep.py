"""A sweep dispatched to a real two-node Ray cluster on this machine: each node advertises one fake device, each
run lands on the node holding its device, and the results come back into the driver's folder."""

import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

from vlabench.results.aggregate import load_results
from vlabench.results.sweep_record import RunRecord

pytest.importorskip("ray")

ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster():
    """Head (fake-a) started with `ray start`; second node (fake-b) started by `vlabench worker --start`."""
    address = f"127.0.0.1:{free_port()}"
    head = [
        "ray",
        "start",
        "--head",
        "--port",
        address.split(":")[1],
        "--num-cpus",
        "1",
        "--include-dashboard=false",
        "--resources",
        '{"vlabench-device:fake-a":1}',
    ]
    worker = [sys.executable, "-m", "vlabench", "worker", "--address", address, "--no-detect"]
    worker += ["--placement", "fake-b", "--num-cpus", "1", "--start"]
    try:
        subprocess.run(head, check=True, env=ENV, capture_output=True, timeout=120)
        started = subprocess.run(worker, env=ENV, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        assert started.stdout.startswith(f"ray start --address {address} --num-cpus 1 --resources")
        yield address
    finally:
        subprocess.run(["ray", "stop", "--force"], env=ENV, capture_output=True, timeout=120)


def cluster_nodes(address: str) -> dict[str, dict]:
    script = (
        f"import json, logging, ray; ray.init(address={address!r}, logging_level=logging.ERROR);"
        "print(json.dumps({n['NodeID']: n['Resources'] for n in ray.nodes() if n['Alive']}))"
    )
    completed = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=60)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_runs_land_on_the_node_holding_their_device_and_results_reach_the_driver(ray_cluster, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    fixed = {"model": "smolvla-tiny", "warmup": 1, "min_iterations": 2, "min_duration_s": 0, "threads": 1}
    devices = [{"name": "cpu", "placement": label} for label in ("fake-a", "fake-b", "fake-c")]
    sweep.write_text(yaml.safe_dump({"fixed": {**fixed, "energy_meter": "none"}, "matrix": {"device": devices}}))
    out = tmp_path / "results"
    command = [sys.executable, "-m", "vlabench", "sweep", str(sweep), "--out", str(out), "--ray", ray_cluster]
    completed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=240)
    assert completed.returncode == 7, completed.stderr  # fake-c is held by no node
    records = {
        record.placement: record
        for record in (RunRecord.model_validate_json(p.read_text()) for p in (out / ".sweep").glob("*.sweep.json"))
    }
    assert records["fake-c"].status == "failed"
    assert records["fake-c"].reason == "no live node of the Ray cluster advertises vlabench-device:fake-c"
    nodes = cluster_nodes(ray_cluster)
    for label in ("fake-a", "fake-b"):
        record = records[label]
        assert record.status == "ok", record.reason
        assert f"vlabench-device:{label}" in nodes[record.node_id]
        assert (out / record.result).is_file()
    assert records["fake-a"].node_id != records["fake-b"].node_id
    loaded, skipped = load_results([out])
    assert skipped == [] and len(loaded) == 2
