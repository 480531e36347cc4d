"""Action-expert optimizations on this host: DP-Cache, lossless expert fusion, V-AEFusion and their combination.

    python benchmarks/optimizations.py [--models smolvla pi0] [--backends torch,onnxruntime,openvino]
                                       [--min-iterations 3] [--min-duration 10] [--cycles 6] [--episodes 50]
                                       [--json-out FILE]

For every model and backend that runs here: the exact path, DP-Cache {0,1,2,6,8,9}, lossless fusion (torch
only) and both, timed interleaved in one process (expert-phase and end-to-end p50, speed-up over the exact path on
the same backend, DP-Cache's open-loop error against the exact path); then `vlabench loop` for V-AEFusion s = 5
alone and with DP-Cache. The optimized expert phase is placed against its roofline: the floor of the work actually
done (computed steps, hoisted K/V) on ONE ceiling ÷ measured p50. That ceiling (GEMM peak and memory bandwidth at
fp32) is measured once, before any run, and shared by every row, so the shares of different rows are comparable
(a ceiling re-measured per run would move with the machine's load). Finally the closed-loop success table
(`vlabench fidelity`'s). bf16 is skipped with a GEMM probe on CPUs that emulate it. ``--json-out`` writes every
table, the ceiling and the settings as JSON (the artifact ``benchmarks/render_docs.py`` renders).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from vlabench.analysis.roofline import Ceiling, analyze, measured_ceiling
from vlabench.atomic import atomic_write_json
from vlabench.commands.loop import run_loop
from vlabench.commands.run import check_fit_together, execute_many, plan_run
from vlabench.config import RunConfig
from vlabench.errors import InsufficientMemoryError, VlabenchError
from vlabench.hardware.detection import cpu_has_native_bf16
from vlabench.kernels.ceilings import gemm_peak, measure_ceilings
from vlabench.models.specs import load_model_spec

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


def the_ceiling(precision: str = "fp32") -> Ceiling:
    """GEMM peak and memory bandwidth of this host's CPU, measured once for the whole benchmark."""
    ceiling = measured_ceiling(measure_ceilings(torch.device("cpu"), (precision,)), precision)
    assert ceiling is not None
    return ceiling


def roofline_share(result, ceiling: Ceiling) -> tuple[float, float]:
    """Floor (ms) of the expert work the run actually did (its computed steps, hoisted K/V) on the one ceiling, and
    floor ÷ measured p50."""
    plan_roofline = result.roofline
    report = analyze(
        load_model_spec(result.model.name),
        result.workload,
        result.precision,
        result.device.profile,
        [ceiling],
        {name: stats.p50 for name, stats in result.timing.phases.items()},
        computed_steps=plan_roofline.computed_steps if plan_roofline else None,
        hoisted=plan_roofline.hoisted if plan_roofline else False,
    )
    action = report.phase("action")
    return action.bounds["measured"].floor_ms, action.share_of_attainable


def run_rows(results: list, ceiling: Ceiling) -> list[dict]:
    exact = results[0][1]
    rows = []
    for method, result in results:
        action, e2e = result.timing.phases["action"].p50, result.timing.phases["e2e"].p50
        error = result.optimization.dp_cache_error if result.optimization else None
        floor_ms, share = roofline_share(result, ceiling)
        rows.append(
            {
                "method": method,
                "iterations": result.timing.iterations,
                "expert_p50_ms": action,
                "expert_speedup": exact.timing.phases["action"].p50 / action,
                "e2e_p50_ms": e2e,
                "e2e_speedup": exact.timing.phases["e2e"].p50 / e2e,
                "open_loop_relative_error": None if error is None else error.relative,
                "open_loop_cosine": None if error is None else error.cosine,
                "expert_floor_ms": floor_ms,
                "expert_share_of_roofline": share,
                "correctness_passed": None if result.correctness is None else result.correctness.passed,
            }
        )
    return rows


def print_runs(model: str, backend: str, rows: list[dict]) -> None:
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
    for row in rows:
        error = row["open_loop_relative_error"]
        table.add_row(
            row["method"],
            f"{row['expert_p50_ms']:.1f}",
            f"{row['expert_speedup']:.2f}",
            f"{row['e2e_p50_ms']:.1f}",
            f"{row['e2e_speedup']:.2f}",
            "0 (exact)" if error is None else f"{error:.3g}",
            "1" if error is None else f"{row['open_loop_cosine']:.5f}",
            f"{row['expert_share_of_roofline']:.0%}",
        )
    console.print(table)


def print_loops(base: RunConfig, backend: str, cycles: int, out: Path) -> list[dict]:
    table = Table(title=f"{base.model} · {backend} · V-AEFusion control loop ({cycles} cycles each, interleaved)")
    for column in ("loop", "exact cycle p50 ms", "fused cycle p50 ms", "speed-up", "overlap p50 ms", "actions/s"):
        table.add_column(column, justify="left" if column == "loop" else "right")
    rows = []
    for label, update in (("s=5", {}), (f"s=5 + dp-cache {PAPER_SET}", {"dp_cache": PAPER_SET})):
        config = base.model_copy(update={"backend": backend, **update})
        result = run_loop(config, 5, cycles, 1, out)
        rows.append(
            {
                "loop": label,
                "cycles": result.cycles,
                "exact_cycle_p50_ms": result.exact.cycle_ms.p50,
                "fused_cycle_p50_ms": result.fused.cycle_ms.p50,
                "speedup_p50": result.speedup_p50,
                "overlap_p50_ms": result.fused.overlap_ms.p50,
                "fused_action_hz_p50": result.fused.action_hz_p50,
            }
        )
        table.add_row(
            label,
            f"{result.exact.cycle_ms.p50:.1f}",
            f"{result.fused.cycle_ms.p50:.1f}",
            f"{result.speedup_p50:.3f}",
            f"{result.fused.overlap_ms.p50:.1f}",
            f"{result.fused.action_hz_p50:.1f}",
        )
    console.print(table)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smolvla", "pi0"])
    parser.add_argument("--backends", default="torch,onnxruntime,openvino")
    parser.add_argument("--min-iterations", type=int, default=3)
    parser.add_argument("--min-duration", type=float, default=10.0)
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--json-out", type=Path, default=None, help="also write every table as JSON to this file")
    args = parser.parse_args()
    ceiling = the_ceiling()
    console.print(
        f"ceiling (measured once, shared by every row): {ceiling.peak_tflops * 1e3:.1f} GFLOP/s fp32 GEMM, "
        f"{ceiling.bandwidth_gbs:.1f} GB/s"
    )
    document: dict = {
        "kind": "optimizations",
        "settings": {key: value for key, value in vars(args).items() if key != "json_out"},
        "precision": "fp32",
        "ceiling": ceiling.model_dump(mode="json"),
        "runs": [],
        "loops": [],
        "skipped": [],
        "closed_loop": None,
    }
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        for model in args.models:
            base = RunConfig(
                model=model,
                warmup=1,
                min_iterations=args.min_iterations,
                min_duration_s=args.min_duration,
                energy_meter="none",
                measure_ceilings=False,
                preprocess=False,  # the action expert's optimizations, without the input pipeline they share
                out=out,
            )
            for backend in args.backends.split(","):
                try:
                    results = backend_results(base, backend)
                except VlabenchError as reason:
                    console.print(f"[yellow]{model} · {backend} skipped:[/] {reason}")
                    document["skipped"].append({"model": model, "backend": backend, "reason": str(reason)})
                    continue
                rows = run_rows(results, ceiling)
                print_runs(model, backend, rows)
                document["runs"].append({"model": model, "backend": backend, "rows": rows})
                loops = print_loops(base, backend, args.cycles, out)
                document["loops"].append({"model": model, "backend": backend, "rows": loops})
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
        scores = evaluate(policy, closed_loop_variants(policy.steps), args.episodes, 0)
        console.print(format_table(scores))
        document["closed_loop"] = [
            {
                "variant": s.variant,
                "episodes": s.episodes,
                "successes": s.successes,
                "mean_final_distance_m": s.mean_final_distance_m,
                "expert_calls_per_chunk": s.expert_calls_per_chunk,
            }
            for s in scores
        ]
    if args.json_out:
        atomic_write_json(args.json_out, document)


if __name__ == "__main__":
    main()
