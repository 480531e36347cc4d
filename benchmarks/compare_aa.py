"""A/A false-regression rate of ``vlabench compare``: pairs of back-to-back runs of one configuration, compared.

    python3 benchmarks/compare_aa.py [--pairs 100] [--models smolvla-tiny pi0-tiny] [--iterations 20]
        [--json-out FILE]

Each pair is two runs of the same configuration on this machine, one after the other (``vlabench run`` in process,
timing only: no energy window); each pair is compared as ``vlabench compare`` does (default threshold, confidence
and noise model). Nothing changed between the two runs, so every "regression" is a false one: the script prints
the count and rate per model and overall, and the count the bootstrap alone (without the runs' drift) would have
flagged. The target is at most 5 false regressions in 100.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from vlabench.atomic import atomic_write_json
from vlabench.commands.run import execute, plan_run
from vlabench.config import RunConfig
from vlabench.results.compare import Settings, latency_change
from vlabench.results.schema import RunResult


def run_once(model: str, iterations: int, out: Path) -> RunResult:
    config = RunConfig(
        model=model,
        warmup=2,
        min_iterations=iterations,
        max_iterations=iterations,
        min_duration_s=0,
        threads=1,
        energy_meter="none",
        preprocess=False,  # as the committed artifact was measured (before the pipeline was timed)
        out=out,
    )
    return execute(plan_run(config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--models", nargs="+", default=["smolvla-tiny", "pi0-tiny"])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    settings = Settings()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.pairs):
            model = args.models[index % len(args.models)]
            first = run_once(model, args.iterations, Path(scratch))
            second = run_once(model, args.iterations, Path(scratch))
            change = latency_change(first, second, settings)
            assert change is not None
            bootstrap_low = change.ci_low + change.noise  # the interval before the drift widened it
            alone = bootstrap_low > 0 and change.relative_change > settings.threshold
            rows.append({"model": model, **change.model_dump(mode="json"), "bootstrap_alone_regression": alone})
            print(
                f"{index + 1:3d} {model}: {change.relative_change:+.1%} "
                f"[{change.ci_low:+.1%}, {change.ci_high:+.1%}] noise {change.noise:.1%} -> {change.verdict}",
                flush=True,
            )
    false = [row for row in rows if row["verdict"] == "regression"]
    per_model = {
        model: {
            "pairs": sum(row["model"] == model for row in rows),
            "false_regressions": sum(row["model"] == model for row in false),
        }
        for model in args.models
    }
    alone = sum(row["bootstrap_alone_regression"] for row in rows)
    print(f"false regressions: {len(false)} of {len(rows)} A/A pairs ({len(false) / len(rows):.0%})")
    print(f"the bootstrap alone, without the runs' drift: {alone} of {len(rows)}")
    if args.json_out:
        atomic_write_json(
            args.json_out,
            {
                "kind": "compare-aa",
                "pairs": len(rows),
                "iterations": args.iterations,
                "settings": settings.model_dump(mode="json"),
                "false_regressions": len(false),
                "false_regression_rate": len(false) / len(rows),
                "bootstrap_alone_false_regressions": alone,
                "per_model": per_model,
                "rows": rows,
            },
        )


if __name__ == "__main__":
    main()
