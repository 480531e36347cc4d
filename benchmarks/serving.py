"""Robots per policy instance on this host: how a device's batches fill as robots are added, what each robot then
waits and costs, the capacity search, and robots offloaded over an emulated link.

    python3 benchmarks/serving.py [--models smolvla-tiny smolvla] [--robots 1 2 4 8 12 16] [--json-out FILE]

For each model (its own execution: see ``EXECUTIONS``; 10 Hz, the batcher's maximum batch ``--max-batch``): one
``vlabench run`` timed pass and energy pass at that batch, then the same prepared policy serves 1, 2, … robots for
``--serve-duration`` seconds each (closed loop), and the capacity search (``--robots auto``) runs under closed and
Poisson arrivals. Every row is what a window served: mean batch, the device's busy share, the slowest robot's p99,
energy per action per robot (the window's energy: its batches and its idle time) and dollars per robot-hour
(electricity: this CPU has no purchase price). Then, for the first model, one robot served in this process (on the
robot) against ``--remote-robots`` robots of ``vlabench run --remote`` through ``vlabench serve`` over the emulated
ethernet and wifi links on loopback. The docs render the artifact (``render_docs.py``: serving)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vlabench.atomic import atomic_write_json
from vlabench.commands.run import InProcessServing, execute_many, plan_run, prepare_contender, search
from vlabench.config import RunConfig
from vlabench.results.schema import RunResult
from vlabench.results.serving import ServingResult
from vlabench.serving.client import run_remote

READY = re.compile(r"on (127\.0\.0\.1:\d+) \(Ctrl-C stops\)")
EXECUTIONS = {
    "smolvla-tiny": {"execution": "per-step"},
    "smolvla": {"execution": "async", "actions_per_chunk": 10},
}
"""A robot at 10 Hz: smolvla-tiny answers within a control step, so it runs one inference per step; smolvla does not,
so it asks for a 10-action chunk as it starts executing the previous one (a chunk a second per robot)."""


def row(served: ServingResult, cost) -> dict:
    """One window: what it served, what the device did, what each robot saw and cost."""
    return {
        "robots": served.robots,
        "arrivals": served.arrivals,
        "requests": served.requests,
        "duration_s": served.duration_s,
        "mean_batch": served.mean_batch,
        "busy_fraction": served.busy_fraction,
        "latency_p50_ms": served.latency.p50,
        "worst_robot_p99_ms": max(robot.latency_p99_ms for robot in served.per_robot),
        "actions_per_s": served.actions_per_s,
        "late_share": served.late_share,
        "joules_per_action": served.joules_per_action,
        "energy_label": served.energy.label if served.energy else None,
        "usd_per_robot_hour": cost.usd_per_robot_hour if cost else None,
        "cost_basis": cost.basis if cost else None,
        "status": served.status,
    }


def settings(args: argparse.Namespace, model: str, out: Path, **more) -> RunConfig:
    return RunConfig(
        model=model,
        precision=args.precision,
        batch=args.max_batch,
        control_hz=args.control_hz,
        serve_duration_s=args.serve_duration,
        max_robots=max(args.robots),
        min_iterations=args.min_iterations,
        min_duration_s=0,
        warmup=1,
        threads=args.threads,
        energy_meter=args.energy_meter,
        out=out,
        **EXECUTIONS.get(model, {}),
        **more,
    )


def model_block(args: argparse.Namespace, model: str, out: Path) -> dict:
    """The timed pass at the maximum batch, then every robot count and both capacity searches on one policy."""
    config = settings(args, model, out)
    plan = plan_run(config)
    baseline: RunResult = execute_many([plan])[0]
    contender, energy = prepare_contender(plan), baseline.energy
    serving = InProcessServing(plan, contender, prepare_contender, plan.meter.meter, energy)
    rows = []
    try:
        for robots in args.robots:
            rows.append(row(*serving.costed(serving.serve(robots))))
            print(f"{model}: {robots} robots {rows[-1]}", flush=True)
        capacities = {}
        for arrivals in ("closed", "poisson"):
            searched = config.model_copy(update={"robots": "auto", "arrivals": arrivals})
            record, _ = search(searched, lambda n, c=searched: serving.serve(n, c), serving.costed, serving.execution)
            capacities[arrivals] = record.model_dump(mode="json")
            print(f"{model}: capacity ({arrivals}) {record.capacity_robots}", flush=True)
    finally:
        serving.close()
    e2e = baseline.timing.phases["e2e"]
    return {
        "model": model,
        "backend": baseline.backend,
        "precision": baseline.precision,
        "execution": baseline.control.execution,
        "actions_per_chunk": baseline.control.actions_per_chunk,
        "control_hz": config.control_hz,
        "max_batch": config.batch,
        "batch_sizes": serving.infer.sizes,
        "batch_e2e_p50_ms": e2e.p50,
        "energy_label": energy.label if energy else None,
        "rows": rows,
        "capacity": capacities,
        "executed_on": baseline.execution.model_dump(mode="json"),
    }


def offload_block(args: argparse.Namespace, model: str, out: Path, on_robot: dict) -> dict:
    """One robot served here (on the robot) against robots offloaded to a policy server over each emulated link."""
    command = [sys.executable, "-m", "vlabench", "serve", "-m", model, "--batch", str(args.max_batch), "--port", "0"]
    command += ["--min-iterations", str(args.min_iterations), "--min-duration", "0", "--warmup", "1"]
    command += ["--threads", str(args.threads), "--energy-meter", args.energy_meter]
    if args.precision:
        command += ["--precision", args.precision]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    links = {}
    try:
        address = next((found.group(1) for line in server.stdout if (found := READY.search(line))), None)
        if address is None:
            raise SystemExit("the policy server did not start")
        for link in args.links:
            config = settings(args, model, out, remote=address, robots=args.remote_robots, link=link)
            result, fault = run_remote(config)
            if fault is not None:
                raise SystemExit(f"offload over {link}: {fault}")
            served = result.serving
            links[link] = {
                **row(served, result.cost),
                "link": served.link.model_dump(mode="json"),
                "uplink_p50_ms": served.split_ms["uplink"].p50,
                "downlink_p50_ms": served.split_ms["downlink"].p50,
                "request_kb": served.payload_bytes["request"].mean / 1000,
                "reply_kb": served.payload_bytes["reply"].mean / 1000,
                "means_ms": {name: stats.mean for name, stats in served.split_ms.items()}
                | {"queue": served.queue.mean, "inference": served.inference.mean},
                "latency_mean_ms": served.latency.mean,
            }
            print(f"offload over {link}: {links[link]}", flush=True)
    finally:
        server.terminate()
        server.wait(60)
    return {"model": model, "on_robot": on_robot, "links": links, "remote_robots": args.remote_robots}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smolvla-tiny", "smolvla"])
    parser.add_argument("--robots", nargs="+", type=int, default=[1, 2, 4, 8, 12, 16])
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--control-hz", type=float, default=10.0)
    parser.add_argument("--precision", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-iterations", type=int, default=5)
    parser.add_argument("--serve-duration", type=float, default=8.0)
    parser.add_argument("--remote-robots", type=int, default=4)
    parser.add_argument("--links", nargs="+", default=["ethernet", "wifi"])
    parser.add_argument("--energy-meter", default="auto")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        models = [model_block(args, model, out) for model in args.models]
        first = models[0]
        on_robot = next(r for r in first["rows"] if r["robots"] == 1)
        offload = offload_block(args, args.models[0], out, on_robot) if args.links else None
    if args.json_out:
        atomic_write_json(
            args.json_out,
            {
                "kind": "serving-benchmark",
                "settings": {**vars(args), "json_out": str(args.json_out)},
                "models": models,
                "offload": offload,
                "wall_s": time.monotonic() - began,
            },
        )


if __name__ == "__main__":
    main()
