"""Projection error: the projection model against every published latency, leave-one-out.

    python3 benchmarks/projection_error.py [--json-out FILE]

For each entry of ``profiles/reported/latencies.yaml`` (all ``reported``, each with its source): the per-operator
roofline floor on the device's datasheet ceiling and its error, and the projection of ``vlabench project`` (roofline
/ achieved share of peak + kernels × (cost per kernel × host factor + device-side time per kernel)) with parameters
fitted on every *other* entry (leave-one-out: no entry is scored with a parameter fitted on it). Prints a Markdown
table and the median absolute errors, over every entry and over the 18 entries scored before the Fig. 2 ACT and
Diffusion Policy rates were added; ``--json-out`` also writes them as JSON (the artifact
``benchmarks/render_docs.py`` renders).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from vlabench.analysis.projection_score import fitted_model
from vlabench.analysis.reported import reported_latencies
from vlabench.atomic import atomic_write_json

FIRST_ENTRIES = 18  # the entries of latencies.yaml scored by the earlier floor / one-efficiency projection (49%)


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json-out", type=Path, default=None, help="also write the scores as JSON to this file")
    args = parser.parse_args()
    model = fitted_model()
    scores = model.scores
    print(
        "| model | device | stack | precision, cams, steps | phase | reported ms | floor ms (error) | kernels |", end=""
    )
    print(" projected ms (error) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in scores:
        e = s.entry
        print(
            f"| {e.model} | {e.device} | {e.stack} | {e.precision}, {e.cameras}, {e.steps} | {s.phase} | "
            f"{s.reported_ms:g} | {s.floor_ms:.1f} ({pct(s.floor_error)}) | {s.kernels} | "
            f"{s.projected_ms:.1f} ({pct(s.projected_error)}) |"
        )
    e2e = [s for s in scores if s.phase == "e2e"]
    labels = [f"{e.model} {e.device} {e.stack} {e.precision}" for e in reported_latencies()[:FIRST_ENTRIES]]
    first = [s for s in e2e if f"{s.entry.model} {s.entry.device} {s.entry.stack} {s.entry.precision}" in labels]
    median = statistics.median(abs(s.projected_error) for s in e2e)
    median_first = statistics.median(abs(s.projected_error) for s in first)
    median_floor = statistics.median(abs(s.floor_error) for s in e2e)
    print()
    print(f"e2e entries: {len(e2e)}")
    print(f"median |error| of the floor: {median_floor:.0%}")
    print(f"median |error| projected (leave-one-out): {median:.0%} over {len(e2e)}")
    print(f"median |error| projected (leave-one-out), the first {len(first)} entries: {median_first:.0%}")
    bands = {stack: model.error_band(stack) for stack in model.parameters.stacks}
    for stack, value in model.parameters.stacks.items():
        print(
            f"{stack}: share of peak {value.share_of_peak:.1%}, {value.dispatch_us:.2f} µs per kernel "
            f"(fitted on {value.observations}), leave-one-out band ±{bands[stack]:.0%}"
        )
    print(f"device-side work per kernel: {model.parameters.kernel_gflop:.3g} GFLOP-equivalent (time = that / peak)")
    print("host factors: " + ", ".join(f"{d} {v:.3g}" for d, v in model.parameters.host_factor.items()))
    if args.json_out:
        document = {
            "kind": "projection-error",
            "method": "leave-one-out",
            "scores": [s.model_dump(mode="json") for s in scores],
            "e2e_entries": len(e2e),
            "median_abs_floor_error": median_floor,
            "median_abs_projected_error": median,
            "first_entries": len(first),
            "median_abs_projected_error_first_entries": median_first,
            "parameters": model.parameters.model_dump(mode="json"),
            "error_bands": bands,
        }
        atomic_write_json(args.json_out, document)


if __name__ == "__main__":
    main()
