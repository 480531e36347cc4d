"""Projection error: the projection model against every published latency, leave-one-out.

    python3 benchmarks/projection_error.py [--json-out FILE]

For each entry of ``profiles/reported/latencies.yaml`` (all ``reported``, each with its source): the per-operator
roofline floor on the device's datasheet ceiling and its error, and the projection of ``vlabench project`` (the
roofline at the stack's achieved shares of peak compute and bandwidth + kernels × (cost per kernel × host factor +
device-side time per kernel)) with parameters fitted on every *other* entry (leave-one-out: no entry is scored with
a parameter fitted on it). Prints a Markdown table, the median absolute errors over every entry and per stack, and
the fitted host model; ``--json-out`` also writes them as JSON (the artifact ``benchmarks/render_docs.py`` renders).
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from vlabench.analysis.projection_score import ProjectionScore, fitted_model
from vlabench.atomic import atomic_write_json
from vlabench.hardware.devices import load_device_profile


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
    median = statistics.median(abs(s.projected_error) for s in e2e)
    median_floor = statistics.median(abs(s.floor_error) for s in e2e)
    per_stack = per_group(e2e, lambda s: s.entry.stack)
    per_class = per_group(e2e, lambda s: load_device_profile(s.entry.device).device_class)
    print()
    print(f"e2e entries: {len(e2e)}")
    print(f"median |error| of the floor: {median_floor:.0%}")
    print(f"median |error| projected (leave-one-out): {median:.1%} over {len(e2e)}")
    for name, group in (("stack", per_stack), ("device class", per_class)):
        for key, (count, value) in group.items():
            print(f"  {name} {key}: median |error| {value:.0%} over {count}")
    bands = {stack: model.error_band(stack) for stack in model.parameters.stacks}
    for stack, value in model.parameters.stacks.items():
        print(
            f"{stack}: share of peak {value.share_of_peak:.1%}, of bandwidth {value.share_of_bandwidth:.1%}, "
            f"{value.dispatch_us:.2f} µs per kernel (fitted on {value.observations}), leave-one-out band "
            f"±{bands[stack]:.0%}"
        )
    hosts = model.parameters.hosts
    print(f"device-side work per kernel: {model.parameters.kernel_gflop:.3g} GFLOP-equivalent (time = that / peak)")
    print("host model (factors): " + "; ".join(host_effects(hosts)))
    print("host factors: " + ", ".join(f"{d} {v:.3g}" for d, v in model.parameters.host_factor.items()))
    if args.json_out:
        document = {
            "kind": "projection-error",
            "method": "leave-one-out",
            "scores": [s.model_dump(mode="json") for s in scores],
            "e2e_entries": len(e2e),
            "median_abs_floor_error": median_floor,
            "median_abs_projected_error": median,
            "per_stack": {k: {"entries": n, "median_abs_projected_error": v} for k, (n, v) in per_stack.items()},
            "per_device_class": {k: {"entries": n, "median_abs_projected_error": v} for k, (n, v) in per_class.items()},
            "parameters": model.parameters.model_dump(mode="json"),
            "error_bands": bands,
        }
        atomic_write_json(args.json_out, document)


def per_group(scores: list[ProjectionScore], key) -> dict[str, tuple[int, float]]:
    """(entries, median |leave-one-out error|) per value of ``key``, largest group first."""
    groups: dict[str, list[float]] = {}
    for score in scores:
        groups.setdefault(key(score), []).append(abs(score.projected_error))
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return {name: (len(errors), statistics.median(errors)) for name, errors in ordered}


def host_effects(hosts) -> list[str]:
    """The host model's fitted effects as factors, e.g. ``jetson class ×4.1``."""
    parts = [f"{name} class ×{math.exp(v):.3g}" for name, v in hosts.class_effects.items()]
    parts += [f"{name} launch path ×{math.exp(v):.3g}" for name, v in hosts.path_effects.items()]
    parts += [f"{name} core ×{math.exp(v):.3g}" for name, v in hosts.core_effects.items()]
    return [*parts, f"clock slope {hosts.clock_slope:.2f}"]


if __name__ == "__main__":
    main()
