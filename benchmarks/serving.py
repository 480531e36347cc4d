"""Robots per policy instance on this host: a batch sweep, and robots served over gRPC on loopback.

    python3 benchmarks/serving.py [--models smolvla-tiny smolvla] [--batches 1 2 4 8] [--precision bf16]
        [--actions-per-chunk 10] [--serve-duration 10] [--remote-robots 4] [--json-out FILE]

For each model and batch B: one ``vlabench run --batch B --robots B --execution async`` in this process (the timed
pass at batch B: the latency every robot of a full batch waits; then B robots served through the dynamic batcher,
each asking for its next chunk as it starts the current one, which lasts ``--actions-per-chunk`` actions at 10 Hz).
Then, for the first model, a ``vlabench serve`` process at the largest batch on loopback and ``--remote-robots``
robots of ``vlabench run --remote``: where their time went (encoding, network, the server's decoding, queueing,
inference). Rows are what the runs measured; the docs render them (``render_docs.py``: serving)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vlabench.atomic import atomic_write_json
from vlabench.commands.isolation import execute_runs
from vlabench.commands.run import plan_run
from vlabench.config import RunConfig
from vlabench.results.schema import RunResult
from vlabench.serving.client import run_remote

READY = re.compile(r"on (127\.0\.0\.1:\d+) \(Ctrl-C stops\)")


def summary(result: RunResult) -> dict:
    """One row: the batch's timed latency, what the robots saw, throughput, energy and cost per robot."""
    served, e2e, cost = result.serving, result.timing.phases["e2e"], result.cost
    return {
        "model": result.model.name,
        "backend": result.backend,
        "precision": result.precision,
        "cameras": result.workload.cameras,
        "batch": result.workload.batch,
        "actions_per_chunk": result.control.actions_per_chunk,
        "batch_e2e_p50_ms": e2e.p50,
        "batch_e2e_p99_ms": e2e.p99,
        "batch_actions_per_s": result.workload.batch * result.control.actions_per_chunk / (e2e.p50 / 1000.0),
        "transport": served.transport,
        "robots": served.robots,
        "requests": served.requests,
        "mean_batch": served.mean_batch,
        "robot_latency_p50_ms": served.latency.p50,
        "robot_latency_p99_ms": served.latency.p99,
        "queue_p50_ms": served.queue.p50,
        "inference_p50_ms": served.inference.p50,
        "split_p50_ms": {name: stats.p50 for name, stats in served.split_ms.items()},
        "served_actions_per_s": served.actions_per_s,
        "late_share": served.late_share,
        "joules_per_action_per_robot": served.joules_per_action,
        "energy_label": result.energy.label if result.energy else None,
        "usd_per_robot_hour": cost.usd_per_robot_hour if cost else None,
        "cost_basis": cost.basis if cost else None,
        "valid": result.valid,
        "executed_on": result.execution.model_dump(mode="json"),
    }


def config(args: argparse.Namespace, model: str, batch: int, out: Path) -> RunConfig:
    return RunConfig(
        model=model,
        precision=args.precision,
        batch=batch,
        robots=batch,
        execution="async",
        actions_per_chunk=args.actions_per_chunk,
        serve_duration_s=args.serve_duration,
        min_iterations=args.min_iterations,
        min_duration_s=0,
        warmup=1,
        threads=args.threads,
        energy_meter=args.energy_meter,
        out=out,
    )


def remote_row(args: argparse.Namespace, model: str, batch: int, out: Path) -> dict:
    command = [sys.executable, "-m", "vlabench", "serve", "-m", model, "--batch", str(batch), "--port", "0"]
    command += ["--min-iterations", str(args.min_iterations), "--min-duration", "0", "--warmup", "1"]
    command += ["--threads", str(args.threads), "--energy-meter", args.energy_meter]
    if args.precision:
        command += ["--precision", args.precision]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        address = None
        for line in server.stdout:
            print(line, end="", flush=True)
            found = READY.search(line)
            if found:
                address = found.group(1)
                break
        if address is None:
            raise SystemExit("the policy server did not start")
        settings = config(args, model, batch, out).model_copy(
            update={"remote": address, "robots": args.remote_robots, "batch": 1}
        )
        return summary(run_remote(settings))
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smolvla-tiny", "smolvla"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--precision", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-iterations", type=int, default=5)
    parser.add_argument("--actions-per-chunk", type=int, default=10)
    parser.add_argument("--serve-duration", type=float, default=10.0)
    parser.add_argument("--remote-robots", type=int, default=4)
    parser.add_argument("--energy-meter", default="auto")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        for model in args.models:
            for batch in args.batches:
                (result,) = execute_runs([plan_run(config(args, model, batch, out))]).results
                rows.append(summary(result))
                row = rows[-1]
                print(
                    f"{model} batch {batch}: batch e2e p50 {row['batch_e2e_p50_ms']:.1f} ms, robots p50 "
                    f"{row['robot_latency_p50_ms']:.1f} ms p99 {row['robot_latency_p99_ms']:.1f} ms, "
                    f"{row['served_actions_per_s']:.1f} actions/s served",
                    flush=True,
                )
        remote = remote_row(args, args.models[0], max(args.batches), out) if args.remote_robots else None
    if args.json_out:
        atomic_write_json(
            args.json_out,
            {
                "kind": "serving-benchmark",
                "settings": {**vars(args), "json_out": str(args.json_out)},
                "rows": rows,
                "remote": remote,
                "wall_s": time.monotonic() - began,
            },
        )


if __name__ == "__main__":
    main()
