"""Action-expert optimizations on this host: DP-Cache, lossless expert fusion, V-AEFusion and their combination.

    python benchmarks/optimizations.py [--models smolvla pi0] [--backends torch,onnxruntime,openvino]
                                       [--min-iterations 3] [--min-duration 10] [--cycles 6] [--episodes 50]

For every model and backend that runs here: the exact path, DP-Cache {0,1,2,6,8,9}, lossless fusion (torch
only) and both, timed interleaved in one process (expert-phase and end-to-end p50, speed-up over the exact path on
the same backend, DP-Cache's open-loop error against the exact path); then `vlabench loop` for V-AEFusion s = 5
alone and with DP-Cache. The optimized expert phase is placed against its roofline on the measured ceilings (the
floor of the work actually done ÷ measured). Finally the closed-loop success table (`vlabench fidelity`'s). bf16
is skipped with a GEMM probe on CPUs that emulate it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from vlabench.commands.loop import run_loop
from vlabench.commands.run import check_fit_together, execute_many, plan_run
from vlabench.config import RunConfig
from vlabench.errors import InsufficientMemoryError, VlabenchError
from vlabench.hardware.detection import cpu_has_native_bf16
from vlabench.kernels.ceilings import gemm_peak

console = Console(width=180)
PAPER_SET = "{0,1,2,6,8,9}"
METHODS = {
    "exact": {},
    f"dp-cache {PAPER_SET}": {"dp_cache": PAPER_SET},
    "fuse-expert-kv": {"fuse_expert_kv": True},
    "dp-cache + fuse-expert-kv": {"dp_cache": PAPER_SET, "fuse_expert_kv": True},
}


def backend_results(base: RunConfig, backend: str) -> list[tuple[str, object]]:
    """Every method on one backend, timed interleaved (one `execute_many`) so drift hits all of them alike, or one
    after another when their replicas do not fit in memory together."""
    methods = [m for m, update in METHODS.items() if backend == "torch" or not update.get("fuse_expert_kv")]
    plans = [plan_run(base.model_copy(update={"backend": backend, **METHODS[m]})) for m in methods]
    try:
        check_fit_together(plans)
        results = execute_many(plans)
    except InsufficientMemoryError:
        console.print(f"[yellow]{base.model} · {backend}: methods run one after another (not enough memory)[/]")
        results = [execute_many([plan])[0] for plan in plans]
    return list(zip(methods, results, strict=True))


def roofline_share(result) -> float | None:
    """Floor of the expert work actually done (computed steps, hoisted K/V; measured ceilings) ÷ measured p50."""
    return result.roofline.phase("action").share_of_attainable if result.roofline else None


def print_runs(model: str, backend: str, results: list) -> None:
    table = Table(title=f"{model} · {backend} · fp32: runs")
    for column in (
        "method",
        "expert p50 ms",
        "expert ×",
        "e2e p50 ms",
        "e2e ×",
        "open-loop rel. err",
        "cosine",
        "expert % of roofline",
    ):
        table.add_column(column, justify="left" if column == "method" else "right")
    exact = results[0][1]
    for method, result in results:
        action, e2e = result.timing.phases["action"].p50, result.timing.phases["e2e"].p50
        error = result.optimization.dp_cache_error if result.optimization else None
        share = roofline_share(result)
        table.add_row(
            method,
            f"{action:.1f}",
            f"{exact.timing.phases['action'].p50 / action:.2f}",
            f"{e2e:.1f}",
            f"{exact.timing.phases['e2e'].p50 / e2e:.2f}",
            "0 (exact)" if error is None else f"{error.relative:.3g}",
            "1" if error is None else f"{error.cosine:.5f}",
            "—" if share is None else f"{share:.0%}",
        )
    console.print(table)


def print_loops(base: RunConfig, backend: str, cycles: int, out: Path) -> None:
    table = Table(title=f"{base.model} · {backend} · V-AEFusion control loop ({cycles} cycles each, interleaved)")
    for column in ("loop", "exact cycle p50 ms", "fused cycle p50 ms", "speed-up", "overlap p50 ms", "actions/s"):
        table.add_column(column, justify="left" if column == "loop" else "right")
    for label, update in (("s=5", {}), (f"s=5 + dp-cache {PAPER_SET}", {"dp_cache": PAPER_SET})):
        config = base.model_copy(update={"backend": backend, **update})
        result = run_loop(config, 5, cycles, 1, out)
        table.add_row(
            label,
            f"{result.exact.cycle_ms.p50:.1f}",
            f"{result.fused.cycle_ms.p50:.1f}",
            f"{result.speedup_p50:.3f}",
            f"{result.fused.overlap_ms.p50:.1f}",
            f"{result.fused.action_hz_p50:.1f}",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smolvla", "pi0"])
    parser.add_argument("--backends", default="torch,onnxruntime,openvino")
    parser.add_argument("--min-iterations", type=int, default=3)
    parser.add_argument("--min-duration", type=float, default=10.0)
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--episodes", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        for model in args.models:
            base = RunConfig(
                model=model,
                warmup=1,
                min_iterations=args.min_iterations,
                min_duration_s=args.min_duration,
                energy_meter="none",
                measure_ceilings=True,
                out=out,
            )
            for backend in args.backends.split(","):
                try:
                    results = backend_results(base, backend)
                except VlabenchError as reason:
                    console.print(f"[yellow]{model} · {backend} skipped:[/] {reason}")
                    continue
                print_runs(model, backend, results)
                print_loops(base, backend, args.cycles, out)
    if not cpu_has_native_bf16():
        probe = gemm_peak("bf16", torch.device("cpu"), budget_s=0.5, max_size=512)
        console.print(
            f"[yellow]bf16 not run:[/] this CPU emulates bf16 ({probe.value * 1e3:.2f} GFLOP/s for a bf16 GEMM); "
            "eager torch bf16 π0 would take tens of minutes per inference, so the bf16 target cannot be measured here."
        )
    if args.episodes:
        from vlabench.optimizations.closed_loop.evaluate import closed_loop_variants, evaluate, format_table
        from vlabench.optimizations.closed_loop.train import load_or_train

        policy = load_or_train(0)
        console.print(format_table(evaluate(policy, closed_loop_variants(policy.steps), args.episodes, 0)))


if __name__ == "__main__":
    main()
