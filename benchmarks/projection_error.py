"""Projection error: the projection model against every published latency, held out three ways.

    python3 benchmarks/projection_error.py [--json-out FILE]

For each entry of ``profiles/reported/latencies.yaml`` (all ``reported``, each with its source and its source group):
the per-operator roofline floor on the device's datasheet ceiling and its error, and the projection of ``vlabench
project`` with parameters fitted without it: leave-one-out (the entry alone), leave-one-source-out (every entry of
its source group: a new source's error) and leave-one-device-out (every entry on its device: a new device's error).
Every published phase is scored (vision, prefill, prefix, action, e2e). Prints a Markdown table of the
leave-one-source-out scores, the headline lines, the median absolute errors per stack, device class, phase and
source, the band coverage, and the parameters fitted on every entry; ``--json-out`` also writes them as JSON (the
artifact ``benchmarks/render_docs.py`` renders).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from vlabench.analysis.projection_bands import BAND_QUANTILE
from vlabench.analysis.projection_score import ProjectionScore, fitted_model, published_entries, scores_for
from vlabench.atomic import atomic_write_json
from vlabench.hardware.devices import load_device_profile

SCHEMES = ("loo", "loso", "lodo")


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0%}"


def median_abs(scores: list[ProjectionScore]) -> float:
    return statistics.median(abs(s.projected_error) for s in scores)


def per_group(scores: list[ProjectionScore], key: Callable[[ProjectionScore], str]) -> dict[str, dict]:
    """Entries, median |error| and median signed error per value of ``key``, largest group first."""
    groups: dict[str, list[float]] = {}
    for score in scores:
        groups.setdefault(key(score), []).append(score.projected_error)
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return {
        name: {
            "entries": len(errors),
            "median_abs_error": statistics.median(abs(e) for e in errors),
            "median_error": statistics.median(errors),
        }
        for name, errors in ordered
    }


def device_class(score: ProjectionScore) -> str:
    return load_device_profile(score.entry.device).device_class


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json-out", type=Path, default=None, help="also write the scores as JSON to this file")
    args = parser.parse_args()
    entries = published_entries()
    model = fitted_model()
    scores = {scheme: scores_for(entries, scheme) for scheme in SCHEMES}
    e2e = {scheme: [s for s in found if s.phase == "e2e"] for scheme, found in scores.items()}
    loso = scores["loso"]
    print(
        "| source | model | device | stack | precision, cams, steps | phase | reported ms | floor ms (error) |", end=""
    )
    print(" projected ms (error, leave-one-source-out) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in loso:
        e = s.entry
        print(
            f"| {e.source_group} | {e.model} | {e.device} | {e.stack} | {e.precision}, {e.cameras}, {e.steps} | "
            f"{s.phase} | {s.reported_ms:g} | {s.floor_ms:.1f} ({pct(s.floor_error)}) | "
            f"{s.projected_ms:.1f} ({pct(s.projected_error)}) |"
        )
    sources = len({s.entry.source_group for s in e2e["loso"]})
    medians = {scheme: median_abs(found) for scheme, found in e2e.items()}
    bands = model.bands
    print()
    print(f"median |error| leave-one-out: {medians['loo']:.1%} over {len(e2e['loo'])} entries")
    count = len(e2e["loso"])
    print(f"median |error| leave-one-source-out: {medians['loso']:.1%} over {count} entries from {sources} sources")
    print(f"median |error| leave-one-device-out: {medians['lodo']:.1%} over {len(e2e['lodo'])} entries")
    print(f"band coverage: {bands.overall_coverage:.1%} of held-out entries inside their band")
    print(f"median |error| of the floor: {median_abs_floor(e2e['loso']):.0%}")
    groups = {
        "stack": lambda s: s.entry.stack,
        "device class": device_class,
        "source": lambda s: s.entry.source_group,
    }
    tables = {
        scheme: {name: per_group(e2e[scheme], key) for name, key in groups.items()}
        | {"phase": per_group(scores[scheme], lambda s: s.phase)}
        for scheme in ("loso", "lodo")
    }
    for name in (*groups, "phase"):
        for key, value in tables["loso"][name].items():
            print(
                f"  {name} {key}: leave-one-source-out {value['median_abs_error']:.0%} over {value['entries']}, "
                f"leave-one-device-out {tables['lodo'][name][key]['median_abs_error']:.0%}"
            )
    for stack, value in model.parameters.stacks.items():
        band = bands.band(stack)
        print(
            f"{stack}: share of peak {value.share_of_peak:.1%}, of bandwidth {value.share_of_bandwidth:.1%}, "
            f"{value.dispatch_us:.2f} µs per kernel ({value.observations} published latencies), band "
            f"{'—' if band.value is None else f'±{band.value:.0%}'} ({band.basis})"
            f"{' uncalibrated' if band.uncalibrated else ''}"
        )
    hosts = model.parameters.hosts
    print(f"device-side work per kernel: {model.parameters.kernel_gflop:.3g} GFLOP-equivalent (time = that / peak)")
    print("host model (factors): " + "; ".join(host_effects(hosts)))
    offsets = model.parameters.class_shares
    print(
        "device-class shares (odds relative to a desktop card): "
        + "; ".join(
            f"{name} ×{math.exp(value):.3g} peak, ×{math.exp(offsets.bandwidth_logit[name]):.3g} bandwidth"
            for name, value in offsets.share_logit.items()
        )
    )
    if args.json_out:
        document = {
            "kind": "projection-error",
            "method": "grouped cross-validation: leave-one-out, leave-one-source-out, leave-one-device-out",
            "scores": [s.model_dump(mode="json") for s in loso],
            "e2e_entries": len(e2e["loso"]),
            "sources": sources,
            "median_abs_projected_error": medians,
            "median_abs_floor_error": median_abs_floor(e2e["loso"]),
            "tables": tables,
            "band_quantile": BAND_QUANTILE,
            "bands": bands.model_dump(mode="json"),
            "stack_bands": {name: bands.band(name).model_dump(mode="json") for name in model.parameters.stacks},
            "parameters": model.parameters.model_dump(mode="json"),
        }
        atomic_write_json(args.json_out, document)


def median_abs_floor(scores: list[ProjectionScore]) -> float:
    return statistics.median(abs(s.floor_error) for s in scores)


def host_effects(hosts) -> list[str]:
    """The host model's fitted effects as factors, e.g. ``jetson class ×4.1``."""
    parts = [f"{name} class ×{math.exp(v):.3g}" for name, v in hosts.class_effects.items()]
    parts += [f"{name} launch path ×{math.exp(v):.3g}" for name, v in hosts.path_effects.items()]
    parts += [f"{name} core ×{math.exp(v):.3g}" for name, v in hosts.core_effects.items()]
    return [*parts, f"clock slope {hosts.clock_slope:.2f}"]


if __name__ == "__main__":
    main()
