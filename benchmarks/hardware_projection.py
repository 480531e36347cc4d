"""Which hardware should I buy? Projections of models onto candidate devices, with feasibility verdicts.

    python3 benchmarks/hardware_projection.py [--models smolvla pi0]
        [--devices jetson-orin-nano-8gb ... h200] [--control-hz 10] [--json-out FILE]

For every model and device it runs the command a user would run, ``vlabench project --model M --device D --stack
pytorch-eager --json``: the fitted projection model (roofline / achieved share of peak + kernels × (cost per kernel
× host factor + device-side time per kernel), parameters fitted on ``profiles/reported/latencies.yaml``) with the
grouped-CV band of the stack on the device's class, and gates the projected latency with ``analysis.cet.gate``
(per-step: one inference per control step). Every figure is a projection (labelled ``projected``), never a
measurement. Prints a Markdown table; for each model, a device whose error band overlaps the next faster device's
is marked as not ranked apart from it. ``--json-out`` writes the commands and their rows (the artifact
``benchmarks/render_docs.py`` renders).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from vlabench.analysis.cet import ExecutionModel, gate
from vlabench.analysis.projected_rows import ProjectedRow, bands_overlap
from vlabench.atomic import atomic_write_json

DEVICES = [
    "jetson-orin-nano-8gb",
    "jetson-orin-nx-16gb",
    "jetson-agx-orin-32gb",
    "jetson-agx-orin-64gb",
    "jetson-thor",
    "rtx-4090",
    "rtx-5090",
    "h200",
]
STACK = "pytorch-eager"


def project(model: str, device: str, control_hz: float) -> dict:
    command = ["vlabench", "project", "--model", model, "--device", device, "--stack", STACK]
    command += ["--control-hz", f"{control_hz:g}", "--json"]
    outcome = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    (row,) = outcome["rows"]
    e2e = row["phases_ms"]["e2e"]
    return {"command": " ".join(command), "row": row, "gate": gate(e2e, e2e, control_hz, ExecutionModel()).model_dump()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smolvla", "pi0"])
    parser.add_argument("--devices", nargs="+", default=DEVICES)
    parser.add_argument("--control-hz", type=float, default=10.0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    document: dict = {
        "kind": "hardware-projection",
        "label": "projected",
        "stack": STACK,
        "control_hz": args.control_hz,
        "execution": "per-step",
        "rows": [],
    }
    print("| model | device | precision | projected e2e ms | band | inferences/s | fits | gate | within the band of |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        found = [project(model, device, args.control_hz) for device in args.devices]
        found.sort(key=lambda f: f["row"]["phases_ms"]["e2e"])
        for index, this in enumerate(found):
            faster = found[index - 1] if index else None
            row, verdict = this["row"], this["gate"]
            tie = faster is not None and bands_overlap(
                ProjectedRow.model_validate(row), ProjectedRow.model_validate(faster["row"])
            )
            this["within_band_of"] = faster["row"]["device"] if tie else None
            document["rows"].append(this)
            print(
                f"| {model} | {row['device']} | {row['precision']} | {row['phases_ms']['e2e']:.1f} | "
                f"±{row['error_band']:.0%} | {row['inference_hz']:.2f} | {row['fits']} | "
                f"{'meets' if verdict['meets_target'] else 'misses'} | {this['within_band_of'] or ''} |"
            )
    if args.json_out:
        atomic_write_json(args.json_out, document)


if __name__ == "__main__":
    main()
