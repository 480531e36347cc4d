"""Harness overhead: the runner's instrumented inference vs a bare perf_counter loop, interleaved.

    python benchmarks/harness_overhead.py [--model smolvla-tiny] [--rounds 30] [--block 10] [--threads 1]

Each round runs ``block`` timed iterations through ``vlabench.measure.timing.measure`` (phase-synchronized spans plus
its unsynchronized pass) and then ``block`` iterations of a bare loop around the same policy and action loop.
Prints medians, interquartile ranges and the ratios runner / bare (target ≤ 1.02).
"""

from __future__ import annotations

import argparse
from time import perf_counter

import numpy as np
import torch

from vlabench.backends import get_backend
from vlabench.measure.action_loops import EulerLoop
from vlabench.measure.timing import RunnerSettings, measure
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smolvla-tiny")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    spec = load_model_spec(args.model)
    workload = Workload.from_spec(spec)
    cpu = torch.device("cpu")
    policy = get_backend("torch").prepare(spec, workload, cpu, "fp32", seed=0)
    loop = EulerLoop(workload.steps, workload.batch, cpu)
    obs = synthetic_observation(spec, workload, 0, torch.float32, cpu)
    noise = initial_noise(workload, 0, torch.float32, cpu)
    settings = RunnerSettings(warmup=1, min_iterations=args.block, min_duration_s=0, max_iterations=args.block)

    runner_phased, runner_unsynced, bare = [], [], []
    for _ in range(3):
        loop.sample(policy, policy.prefix(obs), noise)
    for _ in range(args.rounds):
        measured = measure(policy, loop, [(obs, noise)], settings)
        runner_phased += measured.samples_ms["e2e"]
        runner_unsynced += measured.samples_ms["e2e_unsynced"]
        for _ in range(args.block):
            start = perf_counter()
            loop.sample(policy, policy.prefix(obs), noise)
            policy.synchronize()
            bare.append((perf_counter() - start) * 1e3)

    def describe(name: str, values: list[float]) -> float:
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        print(f"{name:<34} n={len(values):4d}  median {median:8.3f} ms  IQR {q1:8.3f}–{q3:8.3f} ms")
        return float(median)

    print(
        f"model {args.model}, torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds × {args.block}"
    )
    bare_median = describe("bare perf_counter loop", bare)
    phased = describe("runner, phase-synchronized spans", runner_phased)
    unsynced = describe("runner, unsynchronized pass", runner_unsynced)
    print(f"ratio runner(phased) / bare   = {phased / bare_median:.4f}  (target ≤ 1.02)")
    print(f"ratio runner(unsynced) / bare = {unsynced / bare_median:.4f}")


if __name__ == "__main__":
    main()
