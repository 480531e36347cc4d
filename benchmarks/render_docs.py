"""Render the generated blocks of README.md and docs/*.md from the committed artifacts in benchmarks/results/.

    python3 benchmarks/render_docs.py            # rewrite the blocks in place
    python3 benchmarks/render_docs.py --check    # exit 1 and print a diff when a file differs from a fresh render

A generated block is the text between ``<!-- BEGIN generated: NAME -->`` and ``<!-- END generated: NAME -->``;
``BLOCKS`` maps each NAME to the artifacts it reads and the function that renders it. Every artifact has a
provenance sidecar ``<stem>.meta.json`` written by ``benchmarks/capture.py`` (command, date, git revision, CPU
model and flags, load average, wall time), and every block ends with a line saying so. Numbers in the
documentation come from here, never typed by hand: ``tests/unit/benchmarks/test_docs_render.py`` re-renders and
compares.

Standard library only, so the check is fast and runs anywhere the tests do.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from vlabench.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
RESULTS = "benchmarks/results"
BLOCK = re.compile(
    r"(?P<begin><!-- BEGIN generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(?P<end><!-- END generated: (?P=name) -->)",
    re.S,
)
MARKER = re.compile(r"<!-- (BEGIN|END) generated: ([\w-]+) -->")


def documents(root: Path) -> list[Path]:
    """The files that may hold generated blocks."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def meta_path(artifact: Path) -> Path:
    stem = artifact.name[: -len(".json")] if artifact.name.endswith(".json") else artifact.name
    return artifact.with_name(stem + ".meta.json")


def load(root: Path, relative: str) -> tuple[dict, dict]:
    """An artifact and its provenance sidecar."""
    path = root / relative
    return json.loads(path.read_text()), json.loads(meta_path(path).read_text())


# ---------------------------------------------------------------- formatting


def ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"


def pct(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value * 100:.{digits}f}%"


def signed_pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.0f}%"


def ratio(value: float) -> str:
    return f"{value:.2f}×"


def params(count: int | None) -> str:
    if count is None:
        return "—"
    return f"{count / 1e9:.2f} B" if count >= 1e9 else f"{count / 1e6:.1f} M"


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def captioned(intro: str, body: str, meta: dict) -> str:
    """A generated block: its intro line, the body (a table), its provenance line."""
    return "\n".join([intro, "", body, "", provenance(meta)])


def provenance(meta: dict, what: str = "Produced by") -> str:
    """One line: command, date, revision, CPU, load average, wall time."""
    cpu = meta["cpu"]
    flags = ", ".join(cpu["flags"]) or "none of the flags vlabench looks for"
    load = f"{meta['load_average_before'][0]:.2f} at start, {meta['load_average_after'][0]:.2f} at end"
    dirty = " with uncommitted changes" if meta.get("git_dirty") else ""
    line = (
        f"*{what} `{meta['command']}` on {meta['started_utc'][:10]} (vlabench `{meta['git_revision']}`{dirty}; "
        f"{cpu['model']}, {cpu['logical_cores']} logical cores, flags {flags}; 1-minute load average {load}; "
        f"wall time {meta['wall_s']:.0f} s)."
    )
    if meta.get("note"):
        note = meta["note"].rstrip(".")
        line += f" {note[0].upper()}{note[1:]}."
    return line + "*"


# ---------------------------------------------------------------- renderers

PHASE_LABELS = {
    "vision": "vision encoder",
    "prefill": "VLM prefill",
    "prefix": "prefix (vision + prefill)",
    "denoise_step": "denoise step (each)",
    "action": "action expert (all steps)",
    "e2e": "end-to-end",
    "e2e_unsynced": "end-to-end, no inner sync",
}


def render_quickstart(root: Path) -> str:
    result, meta = load(root, f"{RESULTS}/quickstart/smolvla-cpu.json")
    phases = result["timing"]["phases"]
    rows = [
        [label, ms(s["p50"]), ms(s["p90"]), ms(s["p99"]), ms(s["mean"]), pct(s["cov"])]
        for name, label in PHASE_LABELS.items()
        if (s := phases.get(name))
    ]
    control, energy, cost = result["control"], result["energy"], result["cost"]
    verdict = "MEETS" if control["meets_target"] else "MISSES"
    state = result["system_state"]
    timing = result["timing"]
    lines = [
        f"`{result['model']['name']}` · `{result['device']['profile']}` · `{result['backend']}` · "
        f"`{result['precision']}` · {timing['iterations']} timed inferences over {timing['timed_duration_s']:.0f} s "
        f"after {timing['warmup_iterations']} warm-up (first inference {ms(timing['first_inference_ms'])} ms)",
        "",
        table(["phase", "p50 ms", "p90 ms", "p99 ms", "mean ms", "CoV"], rows),
        "",
        f"- **control** ({control['execution']}): {control['inference_hz_p50']:.2f} inferences/s (p50), "
        f"{control['inference_hz_p99']:.2f} (p99); reaction delay {ms(control['reaction_ms'])} ms (p99); "
        f"{control['delivered_action_hz_p99']:.2f} actions/s delivered at p99 → **{verdict}** the "
        f"{control['control_hz']:g} Hz target" + (f" ({control['reason']})" if control["reason"] else ""),
    ]
    if energy:
        lines.append(
            f"- **energy** ({energy['label']}, `{energy['method']}`, scope {energy['scope']}): idle "
            f"{energy['idle_w']:.1f} W, {energy['average_w']:.1f} W over {energy['window_s']:.1f} s → "
            f"{energy['joules_per_inference']:.1f} J per inference, {energy['joules_per_action']:.3f} J per action"
        )
    if cost:
        basis = (
            "electricity only: the generic CPU profile has no purchase price"
            if cost["basis"] == ("electricity-only")
            else cost["basis"]
        )
        lines.append(
            f"- **cost** ({basis}): ${cost['usd_per_million_actions']:.4f} per 1M actions, "
            f"${cost['usd_per_robot_hour']:.5f} per robot-hour"
        )
    lines.append(
        f"- **memory**: {result['memory']['estimated_total_bytes'] / 2**30:.2f} GiB estimated before the run, "
        f"peak RSS {result['memory']['peak_rss_bytes'] / 2**30:.2f} GiB"
    )
    lines.append(
        f"- **machine state** (recorded in the result): background CPU load {state['background_cpu_percent']:.0f}%, "
        f"1-minute load average {state['load_average_1m']:.2f} before the run; "
        f"{sum('coefficient of variation' in w for w in result['warnings'])} phases flagged noisy (CoV above the "
        "warning threshold)"
    )
    lines += ["", provenance(meta, "Rendered from the result of")]
    return "\n".join(lines)


def render_models(root: Path) -> str:
    models, meta = load(root, f"{RESULTS}/models.json")
    full = [m for m in models if m["reference_params"] is not None]
    rows = [
        [
            f"`{m['name']}`",
            params(m["params"]),
            params(m["reference_params"]),
            f"{m['params_delta_pct']:+.1f}%",
            f"{m['prefix_tokens']}",
            f"{m['steps']}",
            f"{m['chunk']}",
        ]
        for m in full
    ]
    lines = [table(["model", "replica params", "published", "Δ", "prefix tokens", "steps", "chunk"], rows)]
    groot = next((m for m in full if m["name"] == "gr00t-n1.5"), None)
    if groot:
        others = max(abs(m["params_delta_pct"]) for m in full if m is not groot)
        lines += [
            "",
            f"Every other replica is within {others:.1f}% of its published count. GR00T N1.5 holds "
            f"{params(groot['params'])} against the published {params(groot['reference_params'])} "
            f"({groot['params_delta_pct']:+.1f}%): NVIDIA's \"3B\" is the checkpoint's "
            "size class, and N1.5 runs only the first 12 of Qwen3-1.7B's 28 layers (`select_layer`), so the replica "
            "builds exactly what runs and not the discarded layers (`reference.source` in "
            "`profiles/models/gr00t-n1.5.yaml`).",
        ]
    lines += ["", provenance(meta)]
    return "\n".join(lines)


def render_hardware(root: Path) -> str:
    doc, meta = load(root, f"{RESULTS}/hardware-projection.json")
    rows = []
    for found in doc["rows"]:
        row, verdict = found["row"], found["gate"]
        fits = "—" if row["fits"] is None else ("yes" if row["fits"] else "**no**")
        phases = row["phases_ms"]
        rows.append(
            [
                f"`{row['model']}`",
                f"`{row['device']}`",
                row["precision"],
                ms(phases["vision"] + phases["prefill"]),
                ms(phases["action"]),
                ms(phases["e2e"]),
                "—" if row["error_band"] is None else f"±{row['error_band'] * 100:.0f}%",
                f"{row['inference_hz']:.2f}",
                f"{row['memory_needed_gb']:.1f} / {row['usable_memory_gb']:g}",
                fits,
                "meets" if verdict["meets_target"] else "**misses**",
                f"`{found['within_band_of']}`" if found["within_band_of"] else "",
            ]
        )
    header = [
        "model",
        "device",
        "precision",
        "vision + prefill ms",
        "action ms",
        "projected e2e ms",
        "error band",
        "inferences/s",
        "GB needed / on device",
        "fits",
        f"{doc['control_hz']:g} Hz ({doc['execution']})",
        "within the band of",
    ]
    (quantile,) = {found["row"]["band_quantile"] for found in doc["rows"]}
    intro = (
        f"All figures **projected** (not measured) for the `{doc['stack']}` stack by `vlabench project`: per-operator "
        "roofline at the stack's fitted shares of peak compute and bandwidth + kernels × cost per kernel × the "
        "device's host factor, at its class's achieved shares, fitted on the published latencies "
        "(`profiles/reported/latencies.yaml`); each device in its class's host (a datacenter card in a server, a "
        "desktop card in a desktop). *GB on device*: the memory a model may use (on a Jetson, what the OS and the "
        "CUDA context leave), against the model deployed by the stack at the precision. *error band*: the "
        f"split-conformal {pct(quantile)} quantile of the stack's leave-one-source-out errors on the device's "
        "class (from three sources or more); *within the band of*: "
        "the next faster device whose band overlaps this one's, so the two are not ranked apart. Rows are in "
        "projected order per model. The gate is per-step: one inference per control step."
    )
    return captioned(intro, table(header, rows, "lllrrrrrrlll"), meta)


def render_projection_error(root: Path) -> str:
    doc, meta = load(root, f"{RESULTS}/projection-error.json")
    rows = []
    for s in doc["scores"]:
        e = s["entry"]
        rows.append(
            [
                e.get("group") or "—",
                e["model"],
                e["device"],
                e["stack"],
                f"{e['precision']}, {e['cameras']}, {e['steps']}",
                s["phase"],
                f"{s['reported_ms']:g}",
                f"{ms(s['floor_ms'])} ({signed_pct(s['floor_error'])})",
                f"{ms(s['projected_ms'])} ({signed_pct(s['projected_error'])})",
            ]
        )
    header = [
        "source",
        "model",
        "device",
        "stack",
        "precision, cams, steps",
        "phase",
        "reported ms",
        "floor ms (error)",
        "projected ms (error, leave-one-source-out)",
    ]
    medians = doc["median_abs_projected_error"]
    bands = doc["bands"]
    count = doc["e2e_entries"]
    headline = [
        f"- median |error| leave-one-out: {pct(medians['loo'], 1)} over {count} entries",
        f"- median |error| leave-one-source-out: {pct(medians['loso'], 1)} over {count} entries from "
        f"{doc['sources']} sources",
        f"- median |error| leave-one-device-out: {pct(medians['lodo'], 1)} over {count} entries",
        f"- band coverage: {pct(bands['overall_coverage'], 1)} of held-out entries inside their band "
        f"(split-conformal {pct(doc['band_quantile'])} quantile of leave-one-source-out errors)",
        f"- median |error| of the roofline floor alone: {pct(doc['median_abs_floor_error'])}",
    ]
    grouped = []
    for name, title in (("stack", "stack"), ("device class", "device class"), ("phase", "phase"), ("source", "source")):
        lines = [
            [
                f"`{key}`",
                str(value["entries"]),
                pct(value["median_abs_error"]),
                signed_pct(value["median_error"]),
                pct(doc["tables"]["lodo"][name][key]["median_abs_error"]),
            ]
            for key, value in doc["tables"]["loso"][name].items()
        ]
        grouped += [
            f"Per {title}:",
            "",
            table(
                [title, "entries", "median abs. error (source held out)", "median error", "(device held out)"],
                lines,
                "lrrrr",
            ),
            "",
        ]
    params = doc["parameters"]
    stack_rows = []
    for name, value in params["stacks"].items():
        band = doc["stack_bands"][name]
        stack_rows.append(
            [
                f"`{name}`",
                pct(value["share_of_peak"], 1),
                pct(value["share_of_bandwidth"], 1),
                f"{value['dispatch_us']:.2f}",
                str(value["observations"]),
                ("—" if band["value"] is None else f"±{band['value'] * 100:.0f}%")
                + (" uncalibrated" if band["uncalibrated"] else ""),
                band["basis"],
                pct(band["coverage"]),
            ]
        )
    hosts = params["hosts"]
    effects = [f"{name} class ×{math.exp(v):.3g}" for name, v in hosts["class_effects"].items()]
    effects += [f"{name} launch path ×{math.exp(v):.3g}" for name, v in hosts["path_effects"].items()]
    effects += [f"`{name}` core ×{math.exp(v):.3g}" for name, v in hosts["core_effects"].items()]
    factors = ", ".join(f"`{device}` ×{value:.3g}" for device, value in params["host_factor"].items())
    offsets = params["class_shares"]
    class_shares = "; ".join(
        f"`{name}` ×{math.exp(offsets['share_logit'][name]):.3g} (peak), "
        f"×{math.exp(offsets['bandwidth_logit'][name]):.3g} (bandwidth)"
        for name in offsets["share_logit"]
    )
    lines = [
        *headline,
        "",
        *grouped,
        "Parameters fitted on every entry, and each stack's band (the entries it is drawn from, and the share of "
        "held-out entries of that pool inside their own band):",
        "",
        table(
            [
                "stack",
                "share of peak",
                "share of bandwidth",
                "µs per kernel",
                "published latencies",
                "band",
                "drawn from",
                "coverage",
            ],
            stack_rows,
            "lrrrrrlr",
        ),
        "",
        "Device classes' shares, fitted jointly: the odds of every stack's share of peak and of bandwidth on a "
        f"class, relative to a desktop card's: {class_shares}.",
        "",
        "Host model, fitted jointly (log host factor = class + launch path + core + slope × log(reference clock / "
        f"host CPU clock)): {'; '.join(effects)}; clock slope {hosts['clock_slope']:.2f}. The host factors of the "
        f"devices with entries: {factors}.",
        "",
        "Every published phase, its source held out:",
        "",
        table(header, rows, "lllllrrrr"),
        "",
        provenance(meta),
    ]
    return "\n".join(lines)


def render_profile(root: Path) -> str:
    doc, meta = load(root, f"{RESULTS}/profile/smolvla-cpu.profile.json")
    rows = []
    for p in doc["summary"]:
        cpu = p["counters"].get("cpu utilization")
        util = "—" if cpu is None else f"{cpu['mean']:.0f} / {cpu['peak']:.0f} {cpu['unit']}"
        rows.append(
            [
                p["phase"],
                str(p["spans"]),
                ms(p["mean_ms"]),
                pct(p["share_of_e2e"]),
                util,
                "—" if p["intensity"] is None else f"{p['intensity']:.1f}",
                p["bound"] or "—",
                "—" if p["achieved_tflops"] is None else f"{p['achieved_tflops'] * 1e3:.1f}",
                pct(p["share_of_attainable"]),
            ]
        )
    header = [
        "phase",
        "spans",
        "mean ms",
        "share of e2e",
        "CPU util mean / peak",
        "FLOP/B",
        "bound",
        "achieved GFLOP/s",
        "% of roofline",
    ]
    ceilings = {c["quantity"]: c for c in doc["measured_ceilings"]}
    gemm = ceilings.get(f"gemm_{doc['precision']}")
    bandwidth = ceilings.get("memory_bandwidth")
    lines = [
        f"`{doc['model']}` · `{doc['device']}` · `{doc['backend']}` · `{doc['precision']}`",
        "",
        table(header, rows, "lrrrrrlrr"),
    ]
    if gemm and bandwidth:
        ridge = gemm["value"] * 1e12 / (bandwidth["value"] * 1e9)
        lines += [
            "",
            f"Ceilings measured in the `ceilings` pass: {gemm['value'] * 1e3:.1f} GFLOP/s {doc['precision']} GEMM, "
            f"{bandwidth['value']:.1f} GB/s, so the ridge is at {ridge:.1f} FLOP/B."
            + (
                " A share above 100% means the phase's operators ran faster than that pass's GEMM probe."
                if any((p["share_of_attainable"] or 0) > 1 for p in doc["summary"])
                else ""
            ),
        ]
    lines += ["", provenance(meta)]
    return "\n".join(lines)


def render_optimizations(root: Path) -> str:
    doc, meta = load(root, f"{RESULTS}/optimizations.json")
    c = doc["ceiling"]
    lines = [
        f"One ceiling for every row, measured once at the start of the run: {c['peak_tflops'] * 1e3:.1f} GFLOP/s "
        f'{c["precision"]} GEMM, {c["bandwidth_gbs"]:.1f} GB/s. "% of roofline" = the floor of the expert work the '
        "row actually did (computed steps, hoisted K/V) on that ceiling ÷ the row's measured expert p50.",
        "",
    ]
    rows = []
    for group in doc["runs"]:
        for r in group["rows"]:
            error = r["open_loop_relative_error"]
            if error is None:
                fidelity = "reference" if r["method"] == "exact" else "lossless (bit-identical in the tests)"
            else:
                fidelity = f"{error:.3g} ({r['open_loop_cosine']:.5f})"
            rows.append(
                [
                    f"{group['model']} · {group['backend']}",
                    r["method"],
                    str(r["iterations"]),
                    ms(r["expert_p50_ms"]),
                    ratio(r["expert_speedup"]),
                    ms(r["e2e_p50_ms"]),
                    ratio(r["e2e_speedup"]),
                    fidelity,
                    ms(r["expert_floor_ms"]),
                    pct(r["expert_share_of_roofline"]),
                ]
            )
    header = [
        "model · backend",
        "method",
        "timed",
        "expert p50 ms",
        "expert ×",
        "e2e p50 ms",
        "e2e ×",
        "open-loop rel. error (cosine)",
        "expert floor ms",
        "% of roofline",
    ]
    lines.append(table(header, rows, "llrrrrrrrr"))
    loop_rows = [
        [
            f"{group['model']} · {group['backend']}",
            r["loop"],
            str(r["cycles"]),
            ms(r["exact_cycle_p50_ms"]),
            ms(r["fused_cycle_p50_ms"]),
            f"{r['speedup_p50']:.3f}×",
            ms(r["overlap_p50_ms"]),
        ]
        for group in doc["loops"]
        for r in group["rows"]
    ]
    if loop_rows:
        lines += [
            "",
            "V-AEFusion (`vlabench loop`, exact and fused loops interleaved cycle by cycle):",
            "",
            table(
                [
                    "model · backend",
                    "loop",
                    "cycles",
                    "exact cycle p50 ms",
                    "fused cycle p50 ms",
                    "speed-up",
                    "overlap ms",
                ],
                loop_rows,
                "llrrrrr",
            ),
        ]
    for skipped in doc["skipped"]:
        lines += ["", f"Skipped {skipped['model']} · {skipped['backend']}: {skipped['reason']}"]
    lines += ["", provenance(meta)]
    return "\n".join(lines)


def render_fidelity(root: Path) -> str:
    doc, meta = load(root, f"{RESULTS}/fidelity.json")
    lines = []
    if doc["closed_loop"]:
        lines += [
            f"Closed loop: {doc['closed_loop_task']}, {doc['closed_loop'][0]['episodes']} seeded episodes per variant.",
            "",
            table(
                ["variant", "success", "mean final distance m", "expert calls per chunk"],
                [
                    [
                        r["variant"],
                        f"{r['successes']}/{r['episodes']}",
                        f"{r['mean_final_distance_m']:.4f}",
                        f"{r['expert_calls_per_chunk']:.1f}",
                    ]
                    for r in doc["closed_loop"]
                ],
            ),
            "",
        ]
    lines += [
        f"Open loop on `{doc['model']}` ({doc['open_loop_reference']}):",
        "",
        table(
            ["variant", "max abs error", "RMSE", "cosine", "relative error", "observations"],
            [
                [
                    r["variant"]["name"],
                    f"{r['error']['max_abs']:.3g}",
                    f"{r['error']['rmse']:.3g}",
                    f"{r['error']['cosine']:.5f}",
                    f"{r['error']['relative']:.3g}",
                    str(r["error"]["samples"]),
                ]
                for r in doc["open_loop"]
            ],
        ),
        "",
        provenance(meta),
    ]
    return "\n".join(lines)


FIG6_REPORTED = {  # the XPU paper's Fig. 6 (pi0, 3 cameras, bf16), as quoted by third-party summaries: reported
    "vlm_layer_gflop": 185.1,
    "vlm_layer_weight_mb": 220,
    "vlm_layer_flop_per_weight_byte": 840,
    "expert_flop_per_weight_byte": 64.5,
}


def render_pi0_fig6(root: Path) -> str:
    doc, meta = load(root, f"{RESULTS}/roofline-pi0-rtx-4090-bf16.json")
    report = doc["report"]
    layer = next(x for x in report["layers"] if (x["phase"], x["block"], x["layer"]) == ("prefill", "llm", 0))
    step = next(p for p in report["phases"] if p["phase"] == "denoise_step")
    datasheet = next(c for c in report["ceilings"] if c["source"] == "datasheet")
    ridge = datasheet["peak_tflops"] * 1e12 / (datasheet["bandwidth_gbs"] * 1e9)
    r = FIG6_REPORTED

    def bound(intensity: float) -> str:
        return "compute" if intensity >= ridge else "memory"

    rows = [
        ["one VLM decoder layer: GFLOP", f"{layer['flops'] / 1e9:.1f}", f"{r['vlm_layer_gflop']:g}"],
        ["one VLM decoder layer: weight MB", f"{layer['weight_bytes'] / 1e6:.1f}", f"{r['vlm_layer_weight_mb']:g}"],
        [
            "one VLM decoder layer: FLOP per weight byte",
            f"{layer['weight_intensity']:.1f}",
            f"{r['vlm_layer_flop_per_weight_byte']:g}",
        ],
        [
            "one expert step: FLOP per weight byte",
            f"{step['weight_intensity']:.1f}",
            f"{r['expert_flop_per_weight_byte']:g}",
        ],
        ["one expert step: FLOP per byte moved (weights, activations, K/V)", f"{step['intensity']:.1f}", "—"],
    ]
    lines = [
        f"`{report['model']}`, {report['cameras']} cameras, {report['prefix_tokens']} prefix tokens, "
        f"`{report['precision']}`; the `rtx-4090` profile's {report['precision']} peak over its bandwidth puts the "
        f"ridge at {ridge:.0f} FLOP/B: the VLM layer is {bound(layer['intensity'])}-bound and the expert step "
        f"{bound(step['intensity'])}-bound (FLOP per byte moved against the ridge).",
        "",
        table(["quantity", "vlabench (analytic)", "reported (paper, Fig. 6)"], rows),
        "",
        provenance(meta),
    ]
    return "\n".join(lines)


def render_artifacts(root: Path) -> str:
    rows, commands = [], []
    for artifact in dict.fromkeys(a for block in BLOCKS.values() for a in block.artifacts):
        meta = json.loads(meta_path(root / artifact).read_text())
        rows.append(
            [
                f"`{artifact.removeprefix(RESULTS + '/')}`",
                f"`{meta['command']}`",
                meta["started_utc"][:16].replace("T", " "),
                f"{meta['wall_s']:.0f}",
                f"{meta['load_average_before'][0]:.2f} → {meta['load_average_after'][0]:.2f}",
            ]
        )
        commands.append(meta["capture_command"])
    return "\n".join(
        [
            table(
                ["artifact (in `benchmarks/results/`)", "command", "UTC start", "wall s", "load (1 min)"], rows, "llrrr"
            ),
            "",
            "```bash",
            *commands,
            "python3 benchmarks/render_docs.py",
            "```",
        ]
    )


GATE_EXAMPLE = {"latency_p50_ms": 280.0, "latency_p99_ms": 300.0, "control_hz": 10.0}
"""Stated, not measured, inputs of the control-gate worked example (docs/measurement.md)."""


def render_gate_example(root: Path) -> str:
    """The control gate's worked example: ``execution.gate`` evaluated on stated latencies, per execution model."""
    from vlabench.analysis.execution import ExecutionModel, gate

    p50, p99, hz = GATE_EXAMPLE["latency_p50_ms"], GATE_EXAMPLE["latency_p99_ms"], GATE_EXAMPLE["control_hz"]
    models = [
        ExecutionModel(),
        ExecutionModel(mode="sync", actions_per_chunk=10),
        ExecutionModel(mode="async", actions_per_chunk=10),
        ExecutionModel(mode="async", actions_per_chunk=2),
    ]
    rows = []
    for model in models:
        verdict = gate(p50, p99, hz, model)
        rows.append(
            [
                model.label(),
                f"{verdict.inference_hz_p99:.2f}/s",
                f"{verdict.reaction_ms:g} ms",
                f"{verdict.delivered_action_hz:.2f}",
                "MEETS" if verdict.meets_target else f"MISSES: {verdict.reason}",
            ]
        )
    slow = [gate(3000.0, 3000.0, hz, m) for m in (ExecutionModel(), ExecutionModel(mode="sync", actions_per_chunk=50))]
    return "\n".join(
        [
            f"Stated latencies (not measured): p50 {p50:g} ms, p99 {p99:g} ms; target {hz:g} Hz. Computed by "
            "`vlabench.analysis.execution.gate`.",
            "",
            table(
                ["execution", "inference rate (p99)", "reaction delay", "delivered actions/s (p50)", "verdict"],
                rows,
            ),
            "",
            f"A stated 3 s inference at {hz:g} Hz: per step {slow[0].inference_hz_p99:.2f} inferences/s, "
            f"{'MEETS' if slow[0].meets_target else 'MISSES'}; sync with 50 actions per chunk delivers "
            f"{slow[1].delivered_action_hz:.2f} actions/s and {'MEETS' if slow[1].meets_target else 'MISSES'} "
            "(every chunk stops the robot for the whole inference).",
        ]
    )


BACKEND_PHASES = ("vision", "prefill", "denoise_step", "action", "e2e")


def by_end_to_end(doc: dict) -> list[dict]:
    """A backends artifact's variants, fastest end to end first."""
    return sorted(doc["variants"], key=lambda r: r["p50_ms"]["e2e"])


def outcome_cells(r: dict, after_speedup: tuple[str, ...] = ()) -> list[str]:
    """A variant's speed-up over eager fp32, ``after_speedup``, its action error and gate verdict, as both backends
    tables show them."""
    return [
        ratio(r["speedup_vs_torch_fp32"]) if r["speedup_vs_torch_fp32"] else "—",
        *after_speedup,
        "reference" if r["variant"] == "torch fp32" else f"{r['relative_action_error']:.2e}",
        "pass" if r["valid"] else "FAIL",
    ]


def measured_once(ceilings: list[dict] | None) -> str:
    """The ceilings a benchmark measured once for every variant's floor, as a sentence ('' when it has none)."""
    if not ceilings:
        return ""
    values = {c["quantity"]: c for c in ceilings}
    peaks = [
        f"{q.removeprefix('gemm_')} {c['value']:.2f} {c['unit']}" for q, c in values.items() if q.startswith("gemm_")
    ]
    bandwidth = values["memory_bandwidth"]["value"]
    int8 = values.get("gemm_int8", {}).get("detail", "")
    ours = " or vlabench's int8 kernel, whichever was faster" if "vlabench's int8 kernel" in int8 else ""
    return (
        f" Every variant's floor rests on ceilings measured once at the start: memory bandwidth {bandwidth:.1f} GB/s; "
        f"GEMM peaks {', '.join(peaks)} (the best of repeated square `torch.matmul` / `torch._int_mm`{ours} calls, "
        "`kernels/ceilings.py`)."
    )


BEATEN_MARK = " ‡"
BEATEN_NOTE = (
    f"{BEATEN_MARK.strip()} Faster than its roofline floor, which no run can be: a ceiling this run measured at that "
    "precision read low, so the share overstates and counts toward no target."
)


def above_floor(share: float | None) -> bool:
    """A share of a roofline floor above it: a low ceiling reading (``BEATEN_NOTE``)."""
    return share is not None and share > 1.0


def floor_pct(share: float | None) -> str:
    """A share of a roofline floor, marked when above it."""
    return pct(share) + BEATEN_MARK * above_floor(share)


def emulation(cpu: dict) -> str:
    """How a benchmark's CPU entry says it emulated a lesser class (``--max-cpu-isa``): empty where it did not."""
    if "emulates" not in cpu:
        return ""
    caps = ", ".join(f"`{name}={value}`" for name, value in cpu["isa_caps"].items())
    return f", **emulated**: {cpu['emulates']}, on {cpu['model']} with every feature above it hidden ({caps})"


def render_backends(root: Path, artifact: str, with_targets: bool) -> str:
    """``benchmarks/backends.py``: every variant's phases, speed-up over eager fp32, expert share, error, gate; with
    the issue's targets only where the workload is theirs (full-size SmolVLA)."""
    doc, meta = load(root, artifact)
    work, cpu, targets = doc["workload"], doc["cpu"], doc["targets"]
    rows = [
        [
            r["variant"],
            *(ms(r["p50_ms"].get(phase)) for phase in BACKEND_PHASES),
            *outcome_cells(r, (floor_pct(r["expert_share_of_floor"]),)),
        ]
        for r in by_end_to_end(doc)
    ]
    beaten = any(above_floor(r["expert_share_of_floor"]) for r in doc["variants"])
    lines = [
        f"`{doc['model']}`, {work['cameras']} cameras ({work['prefix_tokens']} prefix tokens), {work['steps']} "
        f"denoising steps, chunk {work['chunk']}, {doc['threads']} threads; CPU class `{cpu['class']}` "
        f"({', '.join(cpu['flags'])}){emulation(cpu)}.{measured_once(doc.get('ceilings'))} Per-phase p50 in ms:",
        "",
        table(
            [
                "variant",
                *(PHASE_LABELS[p] for p in BACKEND_PHASES),
                "× eager fp32",
                "expert % of floor",
                "action error",
                "gate",
            ],
            rows,
            "l" + "r" * (len(BACKEND_PHASES) + 3) + "l",
        ),
        "",
    ]
    if beaten:
        lines += [BEATEN_NOTE, ""]
    if with_targets and targets.get("checked"):
        share = targets.get("expert_share_of_floor")
        lines.append(
            f"Best variant within the gate: **{targets['best_variant']}**, {ratio(targets['best_speedup'])} eager "
            f"fp32 end to end ({'meets' if targets['speedup_met'] else 'misses'} the "
            f"{ratio(targets['speedup_target'])} target for this CPU class"
            f"{', emulated: not a measurement on that class' if 'emulates' in cpu else ''})"
            + (
                f"; its action expert at {pct(share)} of its roofline floor "
                f"({'meets' if targets.get('expert_share_met') else 'misses'} the "
                f"{pct(targets['expert_share_target'])} target)."
                if "expert_share_target" in targets
                else "."
            )
        )
    for label, entries in (("Skipped", doc["skipped"]), ("Crashed", doc["crashed"])):
        if entries:
            lines += ["", f"{label}: {'; '.join(entries)}."]
    lines += ["", provenance(meta)]
    return "\n".join(lines)


def render_backends_summary(root: Path) -> str:
    """The README's short form of the backends benchmark: end to end, speed-up, action error, gate."""
    doc, meta = load(root, f"{RESULTS}/backends-smolvla-cpu.json")
    rows = [[r["variant"], ms(r["p50_ms"]["e2e"]), *outcome_cells(r)] for r in by_end_to_end(doc)]
    header = ["variant", "end-to-end p50 ms", "× eager fp32", "action error", "gate"]
    return "\n".join([table(header, rows, "lrrrl"), "", provenance(meta)])


def render_expert_profile(root: Path, artifact: str) -> str:
    """``benchmarks/expert_profile.py``: one denoising step by operator class against its roofline floor."""
    doc, meta = load(root, artifact)
    work = doc["workload"]
    lines = [
        f"`{doc['model']}`, {work['cameras']} cameras ({work['prefix_tokens']} prefix tokens, {work['suffix_tokens']} "
        f"action tokens), {doc['threads']} threads, CPU class `{doc['cpu']['class']}`; every floor on one memory "
        f"bandwidth measured at the start, {doc['memory_bandwidth_gbs']:.1f} GB/s:",
        "",
    ]
    rows = []
    beaten = False  # a floor / measured share shown above its floor, for the mark's note
    for rec in doc["variants"]:
        floor = rec["step_floor_ms"]
        step_share = floor / rec["step_p50_ms"] if floor else None
        beaten |= above_floor(step_share)
        rows.append(
            [
                f"**{rec['variant']}**",
                f"step p50 {ms(rec['step_p50_ms'])} (profiled {ms(rec['profiled_step_ms'])})",
                "",
                ms(floor),
                floor_pct(step_share) if floor else "—",
            ]
        )
        if floor:
            rows.append(
                [
                    "",
                    "*bound: the weight matmuls and attention alone*",
                    ms(rec["floored_ops_ms"]),
                    ms(floor),
                    pct(floor / rec["floored_ops_ms"]),
                ]
            )
        for kind, entry in rec["classes"].items():
            share = entry["ms"] / rec["profiled_step_ms"]
            floor_ms = entry["floor_ms"]
            class_share = floor_ms / entry["ms"] if floor_ms and entry["ms"] else None
            beaten |= above_floor(class_share)
            rows.append(
                [
                    "",
                    kind,
                    f"{ms(entry['ms'])} ({pct(share)})",
                    ms(floor_ms) if floor_ms else "—",
                    floor_pct(class_share) if class_share else "—",
                ]
            )
    header = ["variant", "operator class", "ms per step (share)", "roofline floor ms", "floor / measured"]
    lines += [table(header, rows, "llrrr"), "", *([BEATEN_NOTE, ""] if beaten else []), provenance(meta)]
    return "\n".join(lines)


def render_amx_linear(root: Path, artifact: str) -> str:
    """``benchmarks/amx_linear.py``: one int8 Linear call, vlabench's kernel (its AMX or VNNI path) against torchao's
    dynamic int8."""
    doc, meta = load(root, artifact)
    kernel = doc.get("kernel", "amx")  # artifacts from before the VNNI path timed AMX
    rows = []
    for r in doc["shapes"]:
        times, spread, speedup = r["ms"], r["spread_ms"], r[f"{kernel}_speedup"]
        cells = [f"{r['rows']}×{r['in_features']}→{r['out_features']}"]
        for regime in ("hot", "cold"):
            for scheme in (kernel, "torchao"):
                low, high = spread[f"{scheme} {regime}"]
                cells.append(f"{times[f'{scheme} {regime}']:.3f} ({low:.3f}–{high:.3f})")
            cells.append(ratio(speedup[regime]))
        cells += [f"{r[f'{kernel}_top_s']['cold']:.2f}", f"{r[f'{kernel}_cold_weight_gb_s']:.1f}"]
        rows.append(cells)
    header = ["rows×in→out", f"{kernel} hot ms", "torchao hot ms", "hot ×", f"{kernel} cold ms", "torchao cold ms"]
    header += ["cold ×", f"{kernel} cold TOP/s", f"{kernel} cold weight GB/s"]
    intro = (
        f"`{doc['model']}` action expert shapes, {doc['threads']} threads, {doc['cpu']['model']}, flags "
        f"{', '.join(doc['cpu']['flags'])}{emulation(doc['cpu'])}; median (min–max) ms per call:"
    )
    return captioned(intro, table(header, rows, "lrrrrrrrr"), meta)


@dataclass(frozen=True)
class Block:
    artifacts: tuple[str, ...]
    render: Callable[[Path], str]


def render_compare_aa(root: Path, artifact: str) -> str:
    """``benchmarks/compare_aa.py``: separate-process A/A pairs (false regressions) and a +25% slowdown (caught)."""
    doc, meta = load(root, artifact)
    slowdown = pct(doc["slowdown"])
    rows = []
    for name, parts in [*doc["per_model"].items(), ("all", {key: doc[key] for key in ("interleaved", "single")})]:
        for key, label in (("interleaved", f"{doc['runs_per_side']} interleaved runs a side"), ("single", "1 run")):
            part = parts[key]
            rows.append(
                [
                    f"`{name}`" if name != "all" else "all",
                    label,
                    str(part["pairs"]),
                    f"{part['false_regressions']} ({pct(part['false_regression_rate'])})",
                    f"{part['slowdowns_caught']} ({pct(part['caught_rate'])})",
                    f"{part['caught_where_claimed']} of {part['claimed_detectable']}",
                    pct(part["minimum_detectable_median"], 1),
                    pct(part["minimum_detectable_p90"], 1),
                ]
            )
    loads = doc["load_average_1m"]
    intro = (
        f"Separate-process A/A pairs on this machine as it was, other load included (1-minute load average before "
        f"each run {loads['min']:.2f}–{loads['max']:.2f}, median {loads['median']:.2f}): {doc['runs_per_side']} runs "
        f"of one configuration into each of two folders, interleaved, {doc['iterations']} timed inferences each, "
        f"compared as `vlabench compare` does (threshold {pct(doc['settings']['threshold'])}); every regression is a "
        f"false one. The same pairs with every candidate sample {slowdown} longer are a real slowdown; *caught where "
        f"claimed*: among the pairs whose stated minimum detectable change was at most {slowdown}. The first run of "
        "each side alone is the single-run comparison."
    )
    header = ["model", "runs", "pairs", "false regressions", f"+{slowdown} caught", "caught where claimed"]
    header += ["min. detectable (median)", "min. detectable (p90)"]
    return captioned(intro, table(header, rows, "llrrrrrr"), meta)


def dollars(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def render_serving(root: Path) -> str:
    """``benchmarks/serving.py``: robots per policy instance by count, the capacity searches, and robots on the robot
    against robots offloaded over emulated links."""
    doc, meta = load(root, f"{RESULTS}/serving-cpu.json")
    settings = doc["settings"]
    header = [
        "robots",
        "requests",
        "mean batch",
        "device busy",
        "robot p50 ms",
        "slowest robot's p99 ms",
        "late chunks",
        "actions/s",
        "J / action / robot",
        "$ / robot-hour",
    ]
    lines = []
    for block in doc["models"]:
        how = (
            "one inference per control step"
            if block["execution"] == "per-step"
            else f"a {block['actions_per_chunk']}-action chunk asked for as the last one starts ({block['execution']})"
        )
        lines += [
            f"**`{block['model']}`** ({block['backend']} {block['precision']}, {settings['threads']} threads, batches "
            f"of at most {block['max_batch']} on prepared sizes {block['batch_sizes']}; one inference of a full batch "
            f"takes {ms(block['batch_e2e_p50_ms'])} ms at p50): each robot at {block['control_hz']:g} Hz, {how}, "
            f"served for {settings['serve_duration']:g} s per count; energy {block['energy_label']}, cost "
            f"{block['rows'][0]['cost_basis']}.",
            "",
            table(
                header,
                [
                    [
                        str(r["robots"]),
                        str(r["requests"]),
                        f"{r['mean_batch']:.2f}",
                        pct(r["busy_fraction"]),
                        ms(r["latency_p50_ms"]),
                        ms(r["worst_robot_p99_ms"]),
                        pct(r["late_share"]),
                        f"{r['actions_per_s']:.1f}",
                        f"{r['joules_per_action']:.3g}" if r["joules_per_action"] is not None else "—",
                        dollars(r["usd_per_robot_hour"]),
                    ]
                    for r in block["rows"]
                ],
            ),
            "",
        ]
        for arrivals, search in block["capacity"].items():
            steps = ", ".join(f"{step['robots']} {'passes' if step['passed'] else 'fails'}" for step in search["steps"])
            at = next((step for step in search["steps"] if step["robots"] == search["capacity_robots"]), None)
            figures = (
                f": mean batch {at['mean_batch']:.2f}, device busy {pct(at['busy_fraction'])}, "
                f"{at['joules_per_action']:.3g} J per action, ${dollars(at['usd_per_robot_hour'])} per robot-hour"
                if at and at["joules_per_action"] is not None
                else ""
            )
            lines.append(
                f"- capacity, {arrivals} arrivals (every robot's p99 within the {block['control_hz']:g} Hz gate, at "
                f"most {search['most']} tried): **{search['capacity_robots']} robot(s)**{figures} ({steps})."
            )
        lines.append("")
    offload = doc.get("offload")
    if offload:
        on_robot = offload["on_robot"]
        rows = [
            [
                "on the robot (this process)",
                "1",
                ms(on_robot["latency_p50_ms"]),
                ms(on_robot["worst_robot_p99_ms"]),
                "—",
                "—",
                "—",
                f"{on_robot['joules_per_action']:.3g}" if on_robot["joules_per_action"] is not None else "—",
                dollars(on_robot["usd_per_robot_hour"]),
            ]
        ]
        for name, link in offload["links"].items():
            shape = link["link"]
            rows.append(
                [
                    f"offload over {name} ({shape['delay_ms']:g} ± {shape['jitter_ms']:g} ms, "
                    f"{shape['rate_mbps']:g} Mbit/s, {pct(shape['loss'], 1)} loss)",
                    str(link["robots"]),
                    ms(link["latency_p50_ms"]),
                    ms(link["worst_robot_p99_ms"]),
                    ms(link["uplink_p50_ms"]),
                    ms(link["downlink_p50_ms"]),
                    f"{link['request_kb']:.1f}",
                    f"{link['joules_per_action']:.3g}" if link["joules_per_action"] is not None else "—",
                    dollars(link["usd_per_robot_hour"]),
                ]
            )
        lines += [
            f"On the robot against offloaded, `{offload['model']}`: one robot served in this process, and "
            f"{offload['remote_robots']} robots of `vlabench run --remote` (camera-like JPEG q90 frames) served by "
            "`vlabench serve` through each emulated link on loopback (the presets' figures are assumptions, not "
            "measurements of a network); uplink and downlink are each request's one-way times from the four "
            "timestamps, the clocks' offset estimated.",
            "",
            table(
                [
                    "deployment",
                    "robots",
                    "robot p50 ms",
                    "slowest robot's p99 ms",
                    "uplink p50 ms",
                    "downlink p50 ms",
                    "request kB",
                    "J / action / robot",
                    "$ / robot-hour",
                ],
                rows,
                "l" + "r" * 8,
            ),
            "",
        ]
    lines.append(provenance(meta))
    return "\n".join(lines)


def render_site_scale(root: Path) -> str:
    """``benchmarks/site_scale.py --bundled``: the bundled site's build time and what a first visit fetches."""
    doc, meta = load(root, f"{RESULTS}/site-scale.json")
    warm = doc["build_warm_s"]
    spread = f" ({min(warm):.1f}–{max(warm):.1f} s over {len(warm)} builds)" if len(warm) > 1 else ""
    files = sorted(doc["files"].items(), key=lambda item: -item[1])
    rows = [[f"`{name}`", f"{size / 1e3:,.0f}"] for name, size in files]
    body = table(["file fetched on the first visit", "kB"], rows, "lr")
    verdict = "within" if doc["first_visit_bytes"] <= doc["first_visit_budget_bytes"] else "over"
    intro = (
        f"The bundled site ({doc['rows']:,} rows from {doc['runs']} results, {doc['pages']} pages): built in "
        f"{doc['build_warm_median_s']:.1f} s median with the projection model's cache filled{spread}, "
        f"{doc['build_cold_s']:.1f} s from an empty cache (the projection model traced and fitted afresh). Served on "
        f"127.0.0.1 and opened in Chromium, the landing page fetched {doc['first_screen_bytes'] / 1e3:,.0f} kB until "
        f"its rows were ranked ({doc['ready_ms']:,} ms) and {doc['first_visit_bytes'] / 1e3:,.0f} kB once its charts "
        f"were drawn, {verdict} the {doc['first_visit_budget_bytes'] / 1e6:.1f} MB budget."
    )
    return captioned(intro, body, meta)


def _band(interval: list[float], signed: bool = False) -> str:
    low, high = interval
    return f"{low * 100:+.0f}% … {high * 100:+.0f}%" if signed else f"{low * 100:.0f}% … {high * 100:.0f}%"


def render_metaworld_training(root: Path) -> str:
    doc, meta = load(root, f"{RESULTS}/metaworld-training.json")
    config, curve = doc["config"], doc["loss_curve"]
    checkpoint = doc["checkpoint"]
    cpu = doc["cpu"]
    marks = sorted({0, len(curve) // 4, len(curve) // 2, len(curve) - 1})
    every = config["loss_every"]
    facts = [
        ["model", f"`{config['model']}` (seed {config['seed']})"],
        ["tasks", ", ".join(f"`{task}` “{text}”" for task, text in doc["tasks"].items())],
        ["camera", f"`{doc['camera']}`, {doc['image_size']} × {doc['image_size']} px"],
        [
            "demonstrations",
            f"{config['episodes']} episodes per task ({doc['demonstrated_episodes']} in all, the noisy expert "
            f"succeeding in {doc['expert_successes']}), action noise up to {config['action_noise']}, a sample every "
            f"{config['frame_every']} steps: {doc['samples']:,} samples",
        ],
        ["data sha256", f"`{doc['data_sha256'][:16]}…`"],
        [
            "optimization",
            f"{config['train_steps']:,} AdamW steps of {config['batch_size']}, peak learning rate "
            f"{config['learning_rate']:g}, {config['warmup_steps']} warm-up steps, cosine decay",
        ],
        [
            "loss (flow matching)",
            ", ".join(f"{curve[i]:.4f} at step {min((i + 1) * every, config['train_steps']):,}" for i in marks),
        ],
        [
            "wall time",
            f"{doc['data_wall_s']:.0f} s demonstrations + {doc['train_wall_s']:.0f} s training = {doc['wall_s']:.0f} s "
            f"on {doc['threads']} thread(s) of {cpu['model']} ({cpu['logical_cores']} logical cores, flags "
            f"{', '.join(cpu['flags'])}); 1-minute load average {doc['load_average_before'][0]:.2f} before, "
            f"{doc['load_average_after'][0]:.2f} after",
        ],
        [
            "checkpoint",
            f"`{checkpoint['folder']}/model.safetensors`, {checkpoint['bytes'] / 1e6:.1f} MB, sha256 "
            f"`{checkpoint['sha256'][:16]}…`",
        ],
    ]
    return captioned("How the committed reference policy was trained:", table(["", ""], facts, "ll"), meta)


def render_metaworld_fidelity(root: Path) -> str:
    doc, meta = load(root, f"{RESULTS}/metaworld-fidelity.json")
    ts = doc["task_success"]
    reference = next(row for row in ts["variants"] if row["variant"] == ts["reference"])
    episodes = reference["tasks"][0]["episodes"]
    intro = (
        f"{ts['benchmark']}: {len(ts['tasks'])} tasks × {episodes} episodes per variant ({ts['episodes_from']}), "
        f"{ts['actions_per_chunk']} of {ts['chunk']} actions executed per inference with one frame each, at most "
        f"{ts['max_steps']} steps; every backend on {ts['threads']} thread(s) of device `{ts['device']}`. The "
        f"reference is fp32 eager torch. Success with its Wilson 95% interval; Δ is the paired difference to the "
        f"reference (Newcombe's hybrid score interval); speedup is the reference's median policy time per control "
        f"cycle over the variant's, measured in the same interleaved run; a variant whose interval lies wholly below "
        f"the reference's is marked."
    )
    rows = []
    for row in [ts["expert"], ts["random"], *ts["variants"]]:
        is_reference = row["variant"] == ts["reference"]
        runtime = "—" if row["backend"] is None else f"{row['backend']} {row['precision']}"
        rows.append(
            [
                row["variant"],
                runtime,
                row["optimization"] if row["optimization"] != "none" else "—",
                "—" if row["steps"] is None else str(row["steps"]),
                f"{row['successes']}/{row['episodes']} ({row['success_rate'] * 100:.0f}%)",
                _band(row["interval"]),
                "reference"
                if is_reference
                else f"{row['difference'] * 100:+.0f}% ({_band(row['difference_interval'], True)})",
                ms(row["cycle_ms"]["p50"]) if row.get("cycle_ms") else "—",
                ratio(row["speedup"]) if row.get("speedup") else "—",
                "**below the reference**" if row["below_reference"] else "",
            ]
        )
    header = [
        "variant",
        "runtime",
        "optimization",
        "steps",
        "success",
        "95% interval",
        "Δ vs reference (95%)",
        "cycle ms (p50)",
        "speedup",
        "mark",
    ]
    per_task = [
        [row["variant"], *(f"{t['success_rate'] * 100:.0f}% ({_band(t['interval'])})" for t in row["tasks"])]
        for row in [ts["expert"], ts["random"], *ts["variants"]]
    ]
    summary = "; ".join(
        f"{label} {row['successes']}/{row['episodes']} ({row['success_rate'] * 100:.0f}%)"
        for label, row in (
            ("the reference succeeds in", reference),
            ("the scripted expert (the ceiling) in", ts["expert"]),
            ("random actions (the floor) in", ts["random"]),
        )
    )
    if ts.get("interrupted"):
        summary += "; the run was interrupted: only the episodes every variant completed are counted"
    lines = [intro, "", summary[0].upper() + summary[1:] + ".", "", table(header, rows, "llllrrrrrl"), ""]
    lines += ["Per task (success, Wilson 95% interval):", ""]
    lines += [table(["variant", *ts["tasks"]], per_task), ""]
    schemes = [f"`{row['variant']}`: {row['scheme']}" for row in ts["variants"] if row.get("scheme")]
    if schemes:
        lines += ["Quantization schemes: " + "; ".join(schemes) + ".", ""]
    for skipped in doc["skipped"]:
        if skipped["variant"].endswith("(task success)"):
            lines += [f"Skipped {skipped['variant']}: {skipped['reason']}", ""]
    lines.append(provenance(meta))
    return "\n".join(lines)


BLOCKS: dict[str, Block] = {
    "quickstart": Block((f"{RESULTS}/quickstart/smolvla-cpu.json",), render_quickstart),
    "models": Block((f"{RESULTS}/models.json",), render_models),
    "hardware-projection": Block((f"{RESULTS}/hardware-projection.json",), render_hardware),
    "projection-error": Block((f"{RESULTS}/projection-error.json",), render_projection_error),
    "profile": Block((f"{RESULTS}/profile/smolvla-cpu.profile.json",), render_profile),
    "optimizations": Block((f"{RESULTS}/optimizations.json",), render_optimizations),
    "fidelity": Block((f"{RESULTS}/fidelity.json",), render_fidelity),
    "metaworld-training": Block((f"{RESULTS}/metaworld-training.json",), render_metaworld_training),
    "metaworld-fidelity": Block((f"{RESULTS}/metaworld-fidelity.json",), render_metaworld_fidelity),
    "pi0-fig6": Block((f"{RESULTS}/roofline-pi0-rtx-4090-bf16.json",), render_pi0_fig6),
    "gate-example": Block((), render_gate_example),
    "serving": Block((f"{RESULTS}/serving-cpu.json",), render_serving),
    "site-scale": Block((f"{RESULTS}/site-scale.json",), render_site_scale),
}
for _block, _artifact in (("expert-profile", "smolvla-cpu"), ("expert-profile-avx512-bf16", "smolvla-avx512-bf16-cpu")):
    _path = f"{RESULTS}/expert-profile-{_artifact}.json"
    BLOCKS[_block] = Block((_path,), partial(render_expert_profile, artifact=_path))
for _kernel in ("amx", "vnni", "avx2"):
    _artifact = f"{RESULTS}/{_kernel}-linear-smolvla-cpu.json"
    BLOCKS[f"{_kernel}-linear"] = Block((_artifact,), partial(render_amx_linear, artifact=_artifact))
for _block, _artifact in (("compare-aa", "compare-aa"), ("compare-aa-second", "compare-aa-second")):
    _path = f"{RESULTS}/{_artifact}.json"
    BLOCKS[_block] = Block((_path,), partial(render_compare_aa, artifact=_path))
BLOCKS["backends-summary"] = Block((f"{RESULTS}/backends-smolvla-cpu.json",), render_backends_summary)
FULL_SIZE = ("smolvla", "smolvla-avx512-bf16", "smolvla-emulated-avx2", "smolvla-emulated-avx512-vnni")
"""Issue 19's workload, per CPU class (measured or emulated)."""
for _name in (*FULL_SIZE, "smolvla-tiny", "pi0-tiny"):
    _artifact = f"{RESULTS}/backends-{_name}-cpu.json"
    BLOCKS[f"backends-{_name}"] = Block(
        (_artifact,), partial(render_backends, artifact=_artifact, with_targets=_name in FULL_SIZE)
    )
BLOCKS["artifacts"] = Block(tuple(a for block in BLOCKS.values() for a in block.artifacts), render_artifacts)


# ---------------------------------------------------------------- the mechanism


class RenderError(Exception):
    pass


def block_names(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def check_markers(text: str, where: str) -> None:
    """Every BEGIN has its END, in order, with no nesting."""
    open_name = None
    for m in MARKER.finditer(text):
        kind, name = m.groups()
        if kind == "BEGIN":
            if open_name is not None:
                raise RenderError(f"{where}: block {name} begins inside block {open_name}")
            open_name = name
        else:
            if open_name != name:
                raise RenderError(f"{where}: END of {name} without its BEGIN")
            open_name = None
    if open_name is not None:
        raise RenderError(f"{where}: block {open_name} has no END marker")


def render_text(text: str, root: Path, where: str = "<text>") -> str:
    check_markers(text, where)

    def replace(match: re.Match) -> str:
        name = match.group("name")
        if name not in BLOCKS:
            raise RenderError(f"{where}: no renderer for generated block {name!r} (known: {', '.join(BLOCKS)})")
        body = BLOCKS[name].render(root).rstrip("\n")
        return f"{match.group('begin')}{body}\n{match.group('end')}"

    return BLOCK.sub(replace, text)


def stale(root: Path = ROOT) -> Iterator[tuple[Path, str, str]]:
    """(document, committed text, fresh render) of every document whose render differs from what it holds."""
    for path in documents(root):
        if not path.exists():
            continue
        current = path.read_text()
        fresh = render_text(current, root, str(path.relative_to(root)))
        if fresh != current:
            yield path, current, fresh


def check(root: Path = ROOT) -> list[str]:
    """Unified diffs of every document that differs from a fresh render (empty: all up to date)."""
    diffs = []
    for path, current, fresh in stale(root):
        name = str(path.relative_to(root))
        diffs.append(
            "".join(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    fresh.splitlines(keepends=True),
                    f"{name} (committed)",
                    f"{name} (rendered from {RESULTS})",
                )
            )
        )
    return diffs


def write(root: Path = ROOT) -> list[Path]:
    changed = []
    for path, _, fresh in stale(root):
        atomic_write_text(path, fresh)
        changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff when a document is out of date")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        if args.check:
            diffs = check(args.root)
            for diff in diffs:
                sys.stdout.write(diff)
            if diffs:
                print(f"\n{len(diffs)} document(s) differ from the artifacts: run python3 benchmarks/render_docs.py")
                return 1
            print("generated blocks match the artifacts")
            return 0
        for path in write(args.root):
            print(f"rendered {path.relative_to(args.root)}")
        return 0
    except (RenderError, OSError, KeyError, json.JSONDecodeError) as problem:
        print(f"render_docs: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
