"""Backends side by side on this host: each model at each precision, all available backends interleaved.

    python benchmarks/backends.py [--models smolvla pi0] [--precisions fp32 bf16] [--backends all]
                                  [--min-iterations 5] [--min-duration 20] [--out results/benchmarks]

For every (model, precision) it plans `--backend all` (backends that cannot run that precision here are listed
and skipped), checks that all of them fit in memory together (else runs them one after another and says so),
times them interleaved, applies the correctness gate, and prints the comparison table with the speed-up of the
best valid backend over eager torch at the same precision (target ≥ 1.5×). A precision the CPU cannot run
natively (bf16 without AVX512-BF16/AMX) is reported with a GEMM probe instead of hours of emulated math.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from rich.console import Console

from vlabench.cli.views.run import comparison_table
from vlabench.commands.run import backend_names, execute_many, plan_run, plan_runs
from vlabench.config import RunConfig
from vlabench.errors import InsufficientMemoryError, VlabenchError
from vlabench.hardware.detection import NATIVE_BF16_FLAGS, cpu_has_native_bf16
from vlabench.kernels.ceilings import gemm_peak
from vlabench.results.schema import write_result

console = Console(width=160)


def run_group(config: RunConfig, out: Path) -> None:
    try:
        plans, skipped = plan_runs(config)
        groups = [plans]
    except InsufficientMemoryError as exc:
        console.print(f"[yellow]together they do not fit ({exc}); running the backends one after another[/]")
        names = backend_names(config.backend)
        groups, skipped = [], []
        for name in names:
            try:
                groups.append([plan_run(config.model_copy(update={"backend": name}))])
            except VlabenchError as reason:
                skipped.append(f"{name}: {reason}")
    for reason in skipped:
        console.print(f"  skipped {reason}")
    results = [result for group in groups for result in execute_many(group)]
    for result in results:
        write_result(result, out)
    console.print(comparison_table(results))
    eager = next((r for r in results if r.backend == "torch"), None)
    valid = [r for r in results if r.valid and r.backend != "torch"]
    if eager and valid:
        best = min(valid, key=lambda r: r.timing.phases["e2e"].p50)
        ratio = eager.timing.phases["e2e"].p50 / best.timing.phases["e2e"].p50
        verdict = "meets" if ratio >= 1.5 else "misses"
        console.print(f"best valid backend: {best.backend} at {ratio:.2f}× eager torch ({verdict} the 1.5× target)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smolvla", "pi0"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--backends", default="all", help="all, or a comma-separated list")
    parser.add_argument("--min-iterations", type=int, default=5)
    parser.add_argument("--min-duration", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    args = parser.parse_args()
    for precision in args.precisions:
        if precision == "bf16" and not cpu_has_native_bf16():
            probe = gemm_peak("bf16", torch.device("cpu"), budget_s=0.5, max_size=512)
            fp32 = gemm_peak("fp32", torch.device("cpu"), budget_s=0.5, max_size=512)
            console.print(
                f"[yellow]bf16 skipped:[/] this CPU has none of {sorted(NATIVE_BF16_FLAGS)}; a 512³ bf16 GEMM "
                f"runs at {probe.value * 1e3:.2f} GFLOP/s vs {fp32.value * 1e3:.1f} GFLOP/s in fp32 "
                f"({fp32.value / probe.value:.0f}× slower), and OpenVINO's CPU plugin reports no BF16 capability."
            )
            continue
        for model in args.models:
            console.rule(f"{model} {precision}")
            config = RunConfig(
                model=model,
                backend=args.backends,
                precision=precision,
                min_iterations=args.min_iterations,
                min_duration_s=args.min_duration,
                warmup=1,
                energy_meter="none",
            )
            try:
                run_group(config, args.out)
            except VlabenchError as exc:
                console.print(f"[red]{model} {precision}: {exc}[/]")


if __name__ == "__main__":
    main()
