"""Which hardware should I buy? Roofline projections of models onto candidate devices, with feasibility verdicts.

    python3 benchmarks/hardware_projection.py [--models smolvla pi0]
        [--devices jetson-orin-nano-8gb jetson-agx-orin-64gb jetson-thor rtx-4090] [--control-hz 10] [--json-out FILE]

For every model and device it runs the command a user would run, ``vlabench roofline --model M --device D --json``,
twice: at efficiency 1 (the roofline floor: a lower bound on latency, an upper bound on rate) and at
``--efficiency F``, where F is the median share of the roofline that the published eager-PyTorch latencies of that
model reached (``profiles/reported/latencies.yaml``, scored as in ``benchmarks/projection_error.py``). Every
figure is a projection (labelled ``projected``), never a measurement: the devices need not be present. Prints a
Markdown table; ``--json-out`` writes the commands and their JSON outputs (the artifact
``benchmarks/render_docs.py`` renders).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from vlabench.analysis.reported import reported_latencies, score_projections

DEVICES = ["jetson-orin-nano-8gb", "jetson-agx-orin-64gb", "jetson-thor", "rtx-4090"]


def eager_efficiency(model: str) -> tuple[float | None, int]:
    """Median floor/reported over the published eager-PyTorch end-to-end latencies of ``model``."""
    shares = [
        s.efficiency
        for s in score_projections(reported_latencies())
        if s.phase == "e2e" and s.entry.model == model and s.entry.stack == "pytorch-eager"
    ]
    return (statistics.median(shares) if shares else None), len(shares)


def roofline(model: str, device: str, control_hz: float, efficiency: float | None) -> dict:
    command = ["vlabench", "roofline", "--model", model, "--device", device, "--control-hz", f"{control_hz:g}"]
    if efficiency is not None:
        command += ["--efficiency", f"{efficiency:.3f}"]
    command += ["--no-html", "--no-layers", "--json"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    outcome = json.loads(out)
    report = outcome["report"]
    return {
        "command": " ".join(command),
        "precision": report["precision"],
        "efficiency": report["projection"]["efficiency"],
        "efficiency_source": report["projection"]["efficiency_source"],
        "phases_projected_ms": {p["phase"]: p["projected_ms"] for p in report["phases"]},
        "feasibility": outcome["feasibility"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smolvla", "pi0"])
    parser.add_argument("--devices", nargs="+", default=DEVICES)
    parser.add_argument("--control-hz", type=float, default=10.0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    document: dict = {"kind": "hardware-projection", "label": "projected", "control_hz": args.control_hz, "rows": []}
    print("| model | device | precision | floor e2e ms | eager-efficiency e2e ms | action Hz | fits | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for model in args.models:
        efficiency, entries = eager_efficiency(model)
        for device in args.devices:
            row = {
                "model": model,
                "device": device,
                "eager_efficiency": efficiency,
                "eager_efficiency_entries": entries,
                "floor": roofline(model, device, args.control_hz, None),
                "eager": roofline(model, device, args.control_hz, efficiency) if efficiency else None,
            }
            document["rows"].append(row)
            shown = row["eager"] or row["floor"]
            f = shown["feasibility"]
            print(
                f"| {model} | {device} | {shown['precision']} | {row['floor']['feasibility']['e2e_ms']:.1f} | "
                f"{f['e2e_ms']:.1f} | {f['action_hz']:.1f} | {f['fits_memory']} | {f['meets_control_rate']} |"
            )
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
