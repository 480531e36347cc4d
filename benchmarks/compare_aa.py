"""Can reviewers trust ``vlabench compare``? Separate-process A/A pairs on this machine, as it is (other load included).

    python3 benchmarks/compare_aa.py [--pairs 50] [--runs 3] [--models smolvla-tiny pi0-tiny] [--iterations 20]
        [--slowdown 0.25] [--keep DIR] [--json-out FILE]

Each pair is ``--runs`` runs of one configuration into folder A and as many into folder B, interleaved (A, B, A, B,
…), each ``vlabench run`` a process of its own (timing only: no energy pass), then ``vlabench compare A B`` with its
defaults. Nothing changed between A and B, so every "regression" is a false one. The same pair with every B sample
1 + ``--slowdown`` times longer is a real, uniform slowdown: it should be caught. The first run of each side alone is
the single-run pair a user gets without repeats. The script prints, per model and overall, the false regressions,
the slowdowns caught (overall, and where compare's own minimum detectable change said it could see them), the
minimum detectable change compare stated, and the 1-minute load averages before each run (the CPU is shared: the
noise model has to survive the load it sees). Targets: at most 5% false regressions over at least 50 pairs, a +25%
slowdown caught in at least 90% of them.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from vlabench.atomic import atomic_write_json
from vlabench.results.compare import Settings, compare_folders
from vlabench.results.compare_latency import Latency, latency_change
from vlabench.results.schema import RunResult, load_result

KEYS = ("interleaved", "single")


def run_once(model: str, iterations: int, out: Path) -> tuple[RunResult, float]:
    """One ``vlabench run`` in a process of its own; its result and the 1-minute load average before it."""
    load = os.getloadavg()[0]
    command = [sys.executable, "-m", "vlabench", "run", "-m", model, "--warmup", "2", "--threads", "1"]
    command += ["--min-iterations", str(iterations), "--max-iterations", str(iterations), "--min-duration", "0"]
    command += ["--energy-meter", "none", "--no-preprocess", "-o", str(out), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"vlabench run failed ({done.returncode}): {done.stderr[-2000:]}")
    newest = max(out.glob("*.json"), key=lambda path: path.stat().st_mtime_ns)
    return load_result(newest), load


def slowed(result: RunResult, factor: float, phase: str) -> RunResult:
    """``result`` with its ``phase`` samples ``factor`` times longer (what compare reads)."""
    samples = {**result.timing.samples_ms, phase: [v * factor for v in result.timing.samples_ms[phase]]}
    return result.model_copy(update={"timing": result.timing.model_copy(update={"samples_ms": samples})})


def judged(baseline: list[RunResult], candidate: list[RunResult], settings: Settings) -> Latency:
    latency = latency_change(
        baseline,
        candidate,
        threshold=settings.threshold,
        confidence=settings.confidence,
        resamples=settings.resamples,
        seed=settings.seed,
        phase=settings.phase,
    )
    assert latency is not None
    return latency


def summary(rows: list[dict], key: str, slowdown: float) -> dict:
    false = sum(row[key]["aa"] == "regression" for row in rows)
    caught = sum(row[key]["slowed"] == "regression" for row in rows)
    claimed = [row for row in rows if (row[key]["slowed_minimum_detectable"] or math.inf) <= slowdown]
    detectable = [row[key]["minimum_detectable"] for row in rows if row[key]["minimum_detectable"] is not None]
    return {
        "pairs": len(rows),
        "false_regressions": false,
        "false_regression_rate": false / len(rows) if rows else None,
        "slowdowns_caught": caught,
        "caught_rate": caught / len(rows) if rows else None,
        "claimed_detectable": len(claimed),
        "caught_where_claimed": sum(row[key]["slowed"] == "regression" for row in claimed),
        "minimum_detectable_median": float(np.median(detectable)) if detectable else None,
        "minimum_detectable_p90": float(np.percentile(detectable, 90)) if detectable else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3, help="runs of each side, interleaved")
    parser.add_argument("--models", nargs="+", default=["smolvla-tiny", "pi0-tiny"])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--slowdown", type=float, default=0.25)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' results in this folder")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    settings = Settings()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        for index in range(args.pairs):
            model = args.models[index % len(args.models)]
            folders = {side: root / f"pair-{index:03d}" / side for side in "AB"}
            runs: dict[str, list[RunResult]] = {"A": [], "B": []}
            loads = []
            for _ in range(args.runs):
                for side in "AB":
                    result, load = run_once(model, args.iterations, folders[side])
                    runs[side].append(result)
                    loads.append(load)
            [match] = compare_folders(folders["A"], folders["B"], settings).matches
            aa = match.latency
            factor = 1 + args.slowdown
            slow = judged(runs["A"], [slowed(run, factor, settings.phase) for run in runs["B"]], settings)
            single = judged(runs["A"][:1], runs["B"][:1], settings)
            single_slow = judged(runs["A"][:1], [slowed(runs["B"][0], factor, settings.phase)], settings)
            rows.append(
                {
                    "model": model,
                    "load_average_1m": loads,
                    "interleaved": {
                        "aa": aa.verdict,
                        "slowed": slow.verdict,
                        "slowed_minimum_detectable": slow.minimum_detectable,
                        "change": aa.relative_change,
                        "least_disturbed_change": aa.least_disturbed_change,
                        "minimum_detectable": aa.minimum_detectable,
                        "caveats": aa.caveats,
                    },
                    "single": {
                        "aa": single.verdict,
                        "slowed": single_slow.verdict,
                        "slowed_minimum_detectable": single_slow.minimum_detectable,
                        "change": single.relative_change,
                        "minimum_detectable": single.minimum_detectable,
                    },
                }
            )
            print(
                f"{index + 1:3d} {model}: A/A {aa.relative_change:+.1%} (least disturbed "
                f"{aa.least_disturbed_change:+.1%}, detects ≥ {aa.minimum_detectable:.1%}) -> {aa.verdict}; "
                f"+{args.slowdown:.0%} -> {slow.verdict}; single runs {single.relative_change:+.1%} -> "
                f"{single.verdict}, +{args.slowdown:.0%} -> {single_slow.verdict}; load {min(loads):.2f}–"
                f"{max(loads):.2f}",
                flush=True,
            )
    loads = [load for row in rows for load in row["load_average_1m"]]
    result = {
        "kind": "compare-aa",
        "pairs": len(rows),
        "runs_per_side": args.runs,
        "iterations": args.iterations,
        "slowdown": args.slowdown,
        "settings": settings.model_dump(mode="json"),
        "load_average_1m": {"min": min(loads), "median": float(np.median(loads)), "max": max(loads)},
        "interleaved": summary(rows, "interleaved", args.slowdown),
        "single": summary(rows, "single", args.slowdown),
        "per_model": {
            model: {key: summary([row for row in rows if row["model"] == model], key, args.slowdown) for key in KEYS}
            for model in args.models
        },
        "rows": rows,
    }
    for key, title in (("interleaved", f"{args.runs} interleaved runs a side"), ("single", "one run a side")):
        part = result[key]
        print(
            f"{title}: false regressions {part['false_regressions']} of {part['pairs']} A/A pairs "
            f"({part['false_regression_rate']:.0%}); +{args.slowdown:.0%} caught in {part['slowdowns_caught']} of "
            f"{part['pairs']} ({part['caught_rate']:.0%}), in {part['caught_where_claimed']} of the "
            f"{part['claimed_detectable']} where compare said it could detect {args.slowdown:.0%}; minimum "
            f"detectable change median {part['minimum_detectable_median']:.1%}, 90th percentile "
            f"{part['minimum_detectable_p90']:.1%}"
        )
    spread = result["load_average_1m"]
    low, high, middle = spread["min"], spread["max"], spread["median"]
    print(f"1-minute load average before each run: {low:.2f}–{high:.2f} (median {middle:.2f})")
    if args.json_out:
        atomic_write_json(args.json_out, result)


if __name__ == "__main__":
    main()
