"""Helpers of ``run.sh`` (standard library only, so they work before and without vlabench):

- ``results DIR``: one tab-separated line per run result below DIR: path, model, precision, backend, what keeps it
  from ``roofline --result`` (``dpcache``, ``serving``; ``-`` for nothing), file stem.
- ``environment WORK OUT``: ``OUT/environment.json`` from ``WORK/env/*.txt``.
- ``pack WORK OUT``: ``OUT/results.tar.gz`` (every artifact but the Chrome traces, the per-step logs, steps.tsv) and
  ``OUT/traces.tar.gz`` (the traces, gzip-compressed; split into ``traces.tar.gz.partN`` of at most 15 MiB when larger,
  the largest traces left out past ``MAX_TRACE_BYTES``); ``WORK/pack.json`` says what went where.
- ``summary WORK OUT``: ``OUT/summary.md``, one page, every number read from the JSON artifacts.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PART_BYTES = 15 * 1024 * 1024  # the device tool brings back files of at most 16 MiB
MAX_TRACE_BYTES = 4 * PART_BYTES  # 8 files at most: summary, log, environment, results + 4 trace parts
PHASES = (("vision", "vision"), ("prefill", "prefill"), ("denoise_step", "denoise step"), ("e2e", "e2e"))
QUANTIZED = ("int8", "fp8", "int4")  # precisions named beside the variant (the run's own precision is in its header)
SM_COLUMNS = (
    ("sm_activity", "SM activity"),
    ("sm_occupancy", "SM occupancy"),
    ("tensor_activity", "tensor"),
    ("dram_utilization", "DRAM"),
    ("gpu_busy", "GPU busy"),
)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def artifacts(root: Path, kind: str) -> list[tuple[Path, dict]]:
    """Every JSON document of ``kind`` below ``root`` (traces are skipped unparsed)."""
    found = []
    for path in sorted(root.rglob("*.json")) if root.is_dir() else []:
        if path.name.endswith(".trace.json"):
            continue
        data = read_json(path)
        if isinstance(data, dict) and data.get("kind") == kind:
            found.append((path, data))
    return found


def stem_of(path: Path) -> str:
    return path.name.removesuffix(".json")


def variant(result: dict) -> str:
    details = result.get("backend_details") or {}
    optimization = result.get("optimization") or {}
    schedule = optimization.get("dp_cache")
    name = {"torch": "eager", "torch-compile": "compile"}.get(result.get("backend", ""), result.get("backend", "?"))
    if details.get("fused_denoise_loop"):
        name += " + fused loop"
    if schedule:
        computed = ",".join(str(step) for step in schedule.get("computed", []))
        name += f" + DP-Cache {{{computed}}}/{schedule.get('steps', '?')}"
    if optimization.get("fuse_expert_kv"):
        name += " + fuse-expert-kv"
    if result.get("precision") in QUANTIZED:
        name += f" {result['precision']}"
    serving = result.get("serving")
    if isinstance(serving, dict):
        name += f" + {serving.get('robots', '?')} robots served (batch ≤ {serving.get('max_batch', '?')})"
    return name


# ---------------------------------------------------------------------------------------------------------- results
def list_results(root: Path) -> Iterable[str]:
    for path, result in artifacts(root, "run"):
        apart = "-"
        if (result.get("optimization") or {}).get("dp_cache"):
            apart = "dpcache"
        elif result.get("serving"):
            apart = "serving"
        model = (result.get("model") or {}).get("name", "?")
        yield "\t".join(
            (str(path), model, result.get("precision", "?"), result.get("backend", "?"), apart, stem_of(path))
        )


# ------------------------------------------------------------------------------------------------------ environment
def key_values(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()
    return values


def text(path: Path, limit: int = 200_000) -> str | None:
    return path.read_text(errors="replace")[:limit] if path.is_file() else None


def environment(work: Path, out: Path) -> dict:
    env = work / "env"
    python_torch = (text(env / "python-torch.txt") or "").split()
    freeze = text(env / "pip-freeze.txt")
    probe = (text(env / "cuda-device.txt") or "").strip().splitlines()
    unavailable = not probe or probe[-1].startswith("unavailable:")
    document = {
        "run": key_values(env / "run.txt"),
        "cuda_device_name": None if unavailable else probe[-1],
        "cuda_device_error": (probe[-1] if probe else "no probe output") if unavailable else None,
        "python": python_torch[0] if len(python_torch) > 2 else None,
        "torch": python_torch[1] if len(python_torch) > 2 else None,
        "torch_cuda": python_torch[2] if len(python_torch) > 2 else None,
        "python_torch_probe": None if len(python_torch) > 2 else " ".join(python_torch) or None,
        "pip_freeze": freeze.splitlines() if freeze else None,
        "nvidia_smi_q": text(env / "nvidia-smi.txt"),
    }
    (out / "environment.json").write_text(json.dumps(document, indent=2) + "\n")
    return document


# ------------------------------------------------------------------------------------------------------------- pack
def add_tree(archive: tarfile.TarFile, work: Path, folder: str, keep) -> list[str]:
    added = []
    root = work / folder
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        if path.is_file() and keep(path):
            name = str(path.relative_to(work))
            archive.add(path, arcname=name)
            added.append(name)
    return added


def tar_gz(work: Path, paths: list[Path]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as archive:
        for path in paths:
            archive.add(path, arcname=str(path.relative_to(work)))
    return buffer.getvalue()


def pack(work: Path, out: Path) -> dict:
    manifest: dict[str, Any] = {"results.tar.gz": [], "traces": [], "traces_left_out": [], "trace_files": []}
    with tarfile.open(out / "results.tar.gz", "w:gz", compresslevel=9) as archive:
        for folder in ("results", "profiles", "roofline", "logs"):
            manifest["results.tar.gz"] += add_tree(archive, work, folder, lambda p: not p.name.endswith(".trace.json"))
        if (work / "steps.tsv").is_file():
            archive.add(work / "steps.tsv", arcname="steps.tsv")
            manifest["results.tar.gz"].append("steps.tsv")

    kept = sorted((work / "profiles").rglob("*.trace.json"), key=lambda p: p.stat().st_size)
    data = b""
    while kept:
        data = tar_gz(work, kept)
        if len(data) <= MAX_TRACE_BYTES:
            break
        manifest["traces_left_out"].insert(0, str(kept.pop().relative_to(work)))  # the largest goes first
    else:
        data = b""
    manifest["traces"] = [str(p.relative_to(work)) for p in kept]
    if manifest["traces"]:
        if len(data) <= PART_BYTES:
            (out / "traces.tar.gz").write_bytes(data)
            manifest["trace_files"] = ["traces.tar.gz"]
        else:
            for index in range(0, len(data), PART_BYTES):
                name = f"traces.tar.gz.part{index // PART_BYTES}"
                (out / name).write_bytes(data[index : index + PART_BYTES])
                manifest["trace_files"].append(name)
    (work / "pack.json").write_text(json.dumps(manifest, indent=2))
    return manifest


# ---------------------------------------------------------------------------------------------------------- summary
def ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def steps(work: Path) -> list[dict[str, str]]:
    rows = []
    path = work / "steps.tsv"
    for line in path.read_text().splitlines() if path.is_file() else []:
        fields = (line.split("\t") + [""] * 5)[:5]
        rows.append(dict(zip(("name", "status", "seconds", "rc", "reason"), fields, strict=True)))
    return rows


def phase_share(report: dict | None, phase: str = "e2e") -> tuple[float | None, str | None]:
    if not isinstance(report, dict):
        return None, None
    for row in report.get("phases", []):
        if row.get("phase") == phase:
            return row.get("share_of_attainable"), report.get("primary")
    return None, report.get("primary")


def latency_table(work: Path) -> list[str]:
    rooflines = {path.name.removesuffix(".roofline.json"): data for path, data in roofline_outputs(work)}
    lines = [
        "| model | variant | "
        + " | ".join(f"{label} p50 ms" for _, label in PHASES)
        + " | J/inference | roofline share (e2e) | correct |",
        "|---|---|" + "---:|" * len(PHASES) + "---:|---:|---|",
    ]
    results = artifacts(work / "results", "run")
    for path, result in sorted(results, key=lambda item: ((item[1].get("model") or {}).get("name", ""), item[0].name)):
        phases = (result.get("timing") or {}).get("phases") or {}
        cells = [ms((phases.get(key) or {}).get("p50")) for key, _ in PHASES]
        energy = result.get("energy")
        joules = (
            f"{energy['joules_per_inference']:.3g} ({energy.get('method', energy.get('label', '?'))})"
            if isinstance(energy, dict) and energy.get("joules_per_inference") is not None
            else "–"
        )
        command = rooflines.get(stem_of(path))
        if command is not None:
            share, source = phase_share(command.get("report"))
            share_cell = f"{percent(share)} ({source or 'no ceiling'})"
        else:
            share, source = phase_share(result.get("roofline"))
            share_cell = f"{percent(share)} ({source or 'no ceiling'}, result block)" if share is not None else "–"
        correctness = result.get("correctness")
        correct = "reference"
        if correctness is not None:
            error = correctness.get("relative_error", float("nan"))
            correct = f"{'yes' if correctness.get('passed') else 'NO'} ({error:.1e})"
        model = (result.get("model") or {}).get("name", "?")
        lines.append(
            f"| {model} | {variant(result)} | " + " | ".join(cells) + f" | {joules} | {share_cell} | {correct} |"
        )
    if not results:
        lines.append("| (no result) | | " + " | " * len(PHASES) + " | |")
    return lines


def serving_section(work: Path) -> list[str]:
    served = [
        (path, result)
        for path, result in artifacts(work / "results", "run")
        if isinstance(result.get("serving"), dict) and result["serving"].get("latency")
    ]
    if not served:
        return ["No served run."]
    lines = [
        "| model | robots | max batch | mean batch | requests | robot p50 ms | robot p99 ms | queue p50 ms | "
        "inference p50 ms | late share | actions/s | J/action/robot |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for _, result in served:
        block = result["serving"]
        latency, queue, inference = (block.get(key) or {} for key in ("latency", "queue", "inference"))
        joules = block.get("joules_per_action")
        lines.append(
            f"| {(result.get('model') or {}).get('name', '?')} | {block.get('robots', '?')} | "
            f"{block.get('max_batch', '?')} | {block.get('mean_batch', 0):.2f} | {block.get('requests', '?')} | "
            f"{ms(latency.get('p50'))} | {ms(latency.get('p99'))} | {ms(queue.get('p50'))} | "
            f"{ms(inference.get('p50'))} | {percent(block.get('late_share'))} | {block.get('actions_per_s', 0):.1f} | "
            f"{'–' if joules is None else f'{joules:.3g}'} |"
        )
    return lines


def roofline_outputs(work: Path) -> list[tuple[Path, dict]]:
    found = []
    for path in sorted((work / "roofline").glob("*.roofline.json")):
        data = read_json(path)
        if isinstance(data, dict) and isinstance(data.get("report"), dict):
            found.append((path, data))
    return found


def activity(value: Any) -> str:
    if not isinstance(value, dict) or value.get("value") is None:
        return "–"
    return f"{100 * value['value']:.0f}% ({value.get('source', '?')})"


def profile_section(work: Path) -> list[str]:
    profiles = artifacts(work / "profiles", "profile")
    if not profiles:
        return ["No profile artifact."]
    lines = [
        "| model | phase | mean ms | share of roofline | " + " | ".join(label for _, label in SM_COLUMNS) + " |",
        "|---|---|---:|---:|" + "---|" * len(SM_COLUMNS),
    ]
    notes = []
    for path, profile in profiles:
        model = profile.get("model", "?")
        for row in profile.get("summary", []):
            sm = " | ".join(activity(row.get(key)) for key, _ in SM_COLUMNS)
            lines.append(
                f"| {model} | {row.get('phase')} | {ms(row.get('mean_ms'))} | "
                f"{percent(row.get('share_of_attainable'))} | {sm} |"
            )
        tracing = profile.get("sm_tracing") or {}
        for key, label in (("gpm", "GPM"), ("kernels", "kernel SM coverage")):
            block = tracing.get(key) or {}
            if block:
                state = "yes" if block.get("available") else f"no ({block.get('reason', 'no reason given')})"
                notes.append(f"{model}: {label}: {state}")
        passes = ", ".join(f"{p.get('name')} {p.get('duration_s', 0):.1f}s" for p in profile.get("passes", []))
        notes.append(f"{model}: passes {passes}; trace {profile.get('trace_file') or '–'} ({path.parent.name})")
    return [*lines, "", *(f"- {note}" for note in notes)]


def summary(work: Path, out: Path) -> str:
    run = key_values(work / "env" / "run.txt")
    env = read_json(out / "environment.json") or {}
    manifest = read_json(work / "pack.json") or {}
    rows = steps(work)
    trace_files = manifest.get("trace_files", [])
    counts = {status: sum(1 for row in rows if row["status"] == status) for status in ("ok", "failed", "skipped")}
    dry = run.get("mode") == "dry"
    title = "dry run (CPU, tiny models)" if dry else (env.get("cuda_device_name") or "GPU")
    lines = [
        f"# vlabench device check: {title}",
        "",
        f"{run.get('date_utc', '?')} · mode {run.get('mode', '?')} · "
        f"{run.get('device', '?')} {run.get('precision', '?')} · "
        f"wall {run.get('wall_s', '?')} s of a {run.get('budget_s', '?')} s budget · steps: {counts['ok']} ok, "
        f"{counts['failed']} failed, {counts['skipped']} skipped",
        "",
        f"python {env.get('python') or '?'} · torch {env.get('torch') or '?'} (CUDA {env.get('torch_cuda') or '–'}) · "
        f"device {env.get('cuda_device_name') or '–'} · energy meter {run.get('energy_meter', '?')} · "
        f"profile flags {run.get('profile_flags') or '–'} · commit {run.get('git_commit', '?')[:12]}",
        "",
        "## Latency, energy, share of the roofline",
        "",
        *latency_table(work),
        "",
        "Share of the roofline: analytic floor / measured p50, on the ceiling named (`vlabench roofline --result`; "
        "'result block': the roofline block stored in the result, which counts only DP-Cache's computed steps).",
        "",
        "## Robots served by one policy (`vlabench run --robots`)",
        "",
        *serving_section(work),
        "",
        "## SM activity per phase (`vlabench profile`)",
        "",
        *profile_section(work),
        "",
        "## Steps",
        "",
        "| step | status | s | reason |",
        "|---|---|---:|---|",
        *(
            f"| {row['name']} | {row['status']} | {row['seconds']} | {row['reason'].replace('|', '/')} |"
            for row in rows
        ),
        "",
        "## Files",
        "",
        f"- results.tar.gz: {len(manifest.get('results.tar.gz', []))} files (run, profile and roofline JSON, "
        "per-step logs in logs/, steps.tsv)",
        f"- traces: {len(manifest.get('traces', []))} Chrome trace(s) in {', '.join(trace_files) or '–'}"
        + (" (join the parts with cat before untarring)" if len(trace_files) > 1 else ""),
        *(f"- trace left out (size): {name}" for name in manifest.get("traces_left_out", [])),
        "- environment.json (nvidia-smi -q, torch, pip freeze), log.txt (this run's log)",
        "",
    ]
    document = "\n".join(lines)
    (out / "summary.md").write_text(document)
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="helpers of benchmarks/device_check/run.sh")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("results").add_argument("root", type=Path)
    for name in ("environment", "pack", "summary"):
        one = sub.add_parser(name)
        one.add_argument("work", type=Path)
        one.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "results":
        for line in list_results(args.root):
            print(line)
    elif args.command == "environment":
        environment(args.work, args.out)
    elif args.command == "pack":
        manifest = pack(args.work, args.out)
        print(f"packed: {len(manifest['results.tar.gz'])} files, traces in {manifest['trace_files']}")
    else:
        summary(args.work, args.out)
        print(f"summary: {args.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
