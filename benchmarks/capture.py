"""Run a command and record how it was produced: the provenance sidecar of a documentation artifact.

    python3 benchmarks/capture.py --artifact benchmarks/results/models.json --stdout -- vlabench models --json
    python3 benchmarks/capture.py --artifact benchmarks/results/quickstart/smolvla-cpu.json \\
        --collect 'benchmarks/results/quickstart/*_smolvla_*.json' -- vlabench run --model smolvla --out ...

Runs the command after ``--`` and writes ``<artifact stem>.meta.json`` next to the artifact: the command line (and
this wrapper's, which reproduces the artifact), UTC
start and end, wall time, the 1/5/15-minute load average before and after, the vlabench git revision (and whether
the tree had uncommitted changes), the CPU model, core count and SIMD flags, and the Python version. The artifact
itself is what the command wrote: its stdout (``--stdout``), a file it wrote under a timestamped name
(``--collect GLOB``: the one file matching GLOB that did not exist before is renamed to the artifact), or a file
at the artifact path (a ``--json-out`` option of the command). ``benchmarks/render_docs.py`` reads both files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from vlabench.atomic import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
FLAGS_OF_INTEREST = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_bf16",
    "amx_tile",
    "amx_int8",
    "neon",
    "asimd",
)


def meta_path(artifact: Path) -> Path:
    """`x/y.json` → `x/y.meta.json`; `x/y.profile.json` → `x/y.profile.meta.json`."""
    name = artifact.name
    stem = name[: -len(".json")] if name.endswith(".json") else name
    return artifact.with_name(stem + ".meta.json")


def cpu_info() -> dict:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {
        "model": model,
        "logical_cores": os.cpu_count(),
        "flags": [flag for flag in FLAGS_OF_INTEREST if flag in flags],
    }


def git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def tree_state() -> dict[str, object]:
    """The commit checked out and whether tracked files differ from it (None for both outside a git checkout)."""
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_revision": git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(dirty) if dirty is not None else None,
    }


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True, help="the artifact this command produces")
    parser.add_argument("--stdout", action="store_true", help="the artifact is the command's stdout")
    parser.add_argument("--collect", default=None, help="glob of the file the command writes under a varying name")
    parser.add_argument("--note", default=None, help="a sentence stored in the sidecar (e.g. why fewer episodes)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    args.artifact.parent.mkdir(parents=True, exist_ok=True)
    before = set(glob.glob(args.collect)) if args.collect else set()
    meta = {
        "artifact": str(args.artifact),
        "command": shlex.join(command),
        "capture_command": shlex.join(["python3", "benchmarks/capture.py", *sys.argv[1:]]),
        "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "load_average_before": load_average(),
        # the tree the command runs from, read before it writes its artifact (a tracked file when re-captured)
        **tree_state(),
    }
    start = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.PIPE if args.stdout else None, check=False)
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    meta["finished_utc"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    meta["load_average_after"] = load_average()
    meta["exit_code"] = completed.returncode
    if completed.returncode != 0:
        print(f"capture: the command exited {completed.returncode}; no artifact written", file=sys.stderr)
        return completed.returncode
    if args.stdout:
        text = completed.stdout.decode()
        try:
            if args.artifact.suffix == ".json":
                atomic_write_json(args.artifact, json.loads(text))
            else:
                atomic_write_text(args.artifact, text)
        except ValueError as exc:  # not JSON, or a NaN or an infinity in it
            print(f"capture: the command's output is not strict JSON ({exc}); no artifact written", file=sys.stderr)
            return 1
    elif args.collect:
        new = sorted(set(glob.glob(args.collect)) - before)
        if len(new) != 1:
            print(f"capture: expected one new file matching {args.collect}, found {new}", file=sys.stderr)
            return 1
        os.replace(new[0], args.artifact)
    if not args.artifact.exists():
        print(f"capture: the command did not produce {args.artifact}", file=sys.stderr)
        return 1
    meta.update({"cpu": cpu_info(), "python": platform.python_version()})
    if args.note:
        meta["note"] = args.note
    atomic_write_json(meta_path(args.artifact), meta)
    loads = f"load {meta['load_average_before']} → {meta['load_average_after']}"
    print(f"capture: {args.artifact} ({meta['wall_s']} s, {loads})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
