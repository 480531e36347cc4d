"""Projection error: the roofline projection against every published latency vlabench can compare with.

    python benchmarks/projection_error.py [--host-model smolvla] [--json-out FILE]

For each entry of ``profiles/reported/latencies.yaml`` (all ``reported``, each with its source): the
per-operator roofline floor on the device's datasheet ceiling (efficiency 1), its error, the efficiency the
device reached (floor / reported), and a projection calibrated by the median efficiency of the *other* entries of
the same software stack and model, else of the same stack (leave-one-out). With ``--host-model``, the model is
also measured here (torch, measured ceilings) and its own floor error is added. Prints a Markdown table and the
median absolute errors; ``--json-out`` also writes them as JSON (the artifact ``benchmarks/render_docs.py`` renders).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from vlabench.analysis.reported import reported_latencies, score_projections
from vlabench.commands.run import execute, plan_run
from vlabench.config import RunConfig


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host-model", default=None, help="also measure this model here and score its projection")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the scores as JSON to this file")
    args = parser.parse_args()
    scores = score_projections(reported_latencies())
    header = "| model | device | stack | precision, cams, steps | phase | reported ms | floor ms (error) | efficiency |"
    print(header + " calibrated ms (error, n) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in scores:
        e = s.entry
        calibrated = (
            "—"
            if s.calibrated_ms is None
            else f"{s.calibrated_ms:.1f} ({pct(s.calibrated_error)}, n={s.calibration_entries})"
        )
        print(
            f"| {e.model} | {e.device} | {e.stack} | {e.precision}, {e.cameras}, {e.steps} | {s.phase} | "
            f"{s.reported_ms:g} | {s.floor_ms:.1f} ({pct(s.floor_error)}) | {s.efficiency:.1%} | {calibrated} |"
        )
    e2e = [s for s in scores if s.phase == "e2e"]
    print()
    print(f"e2e entries: {len(e2e)}")
    print(f"median |error| of the floor: {statistics.median(abs(s.floor_error) for s in e2e):.0%}")
    calibrated = [abs(s.calibrated_error) for s in e2e if s.calibrated_error is not None]
    median = statistics.median(calibrated)
    print(f"median |error| calibrated (leave-one-out): {median:.0%} over {len(calibrated)}")
    document: dict = {
        "kind": "projection-error",
        "scores": [s.model_dump(mode="json") for s in scores],
        "e2e_entries": len(e2e),
        "median_abs_floor_error": statistics.median(abs(s.floor_error) for s in e2e),
        "median_abs_calibrated_error": median,
        "calibrated_entries": len(calibrated),
        "host": None,
    }
    if args.host_model:
        with tempfile.TemporaryDirectory() as folder:
            config = RunConfig(
                model=args.host_model,
                min_iterations=3,
                min_duration_s=0,
                warmup=1,
                measure_ceilings=True,
                energy_meter="none",
                out=Path(folder),
            )
            result = execute(plan_run(config))
        report = result.roofline
        phases = report.phases
        print(f"\nmeasured here: {args.host_model} torch {result.precision} on {result.device.profile}")
        for phase in phases:
            floor = phase.bounds[report.primary].floor_ms
            print(
                f"  {phase.phase}: measured p50 {phase.measured_ms:.1f} ms, floor {floor:.1f} ms "
                f"({(floor - phase.measured_ms) / phase.measured_ms:+.0%}), efficiency {phase.share_of_attainable:.1%}"
            )
        document["host"] = {
            "model": args.host_model,
            "backend": result.backend,
            "precision": result.precision,
            "device": result.device.profile,
            "iterations": result.timing.iterations,
            "ceiling": report.ceiling(report.primary).model_dump(mode="json"),
            "phases": [
                {
                    "phase": phase.phase,
                    "measured_ms": phase.measured_ms,
                    "floor_ms": phase.bounds[report.primary].floor_ms,
                    "share_of_roofline": phase.share_of_attainable,
                }
                for phase in phases
            ],
        }
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
