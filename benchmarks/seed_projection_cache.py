"""Write ``profiles/projection-seed/``: the projection cache's entries that the bundled leaderboard and ``vlabench
project --all`` need (each model's traced facts, the fit and its held-out scores), computed afresh in an empty cache,
so that a first ``vlabench site build`` or ``project`` reads them instead of tracing and fitting for minutes.

The entries are keyed as the cache keys them (the spec, the workload, the precision, vlabench's and torch's versions
and the code they depend on), so a seed older than the code or the profiles is simply never read. ``manifest.json``
records what the seed was written from; ``tests/unit/analysis/test_projection_seed.py`` fails when the code or the
profiles have moved on since, naming this script.

Usage: python3 benchmarks/seed_projection_cache.py [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "profiles" / "projection-seed"
PROFILE_DATA = ("profiles/models", "profiles/reported", "profiles/devices")


def profiles_fingerprint(root: Path = ROOT) -> str:
    """A hash of the profile files the projection reads (models, published latencies, devices)."""
    from vlabench.analysis.projection_cache import files_fingerprint

    return files_fingerprint(root, PROFILE_DATA, "*.yaml")


def manifest() -> dict:
    """What a seed written now would be written from."""
    import torch

    from vlabench import __version__
    from vlabench.analysis.projection_cache import FACT_SOURCES, FIT_SOURCES, FORMAT, code_fingerprint

    return {
        "format": FORMAT,
        "vlabench": __version__,
        "torch": torch.__version__,
        "fact_code": code_fingerprint(FACT_SOURCES),
        "fit_code": code_fingerprint(FIT_SOURCES),
        "profiles": profiles_fingerprint(),
    }


def compute_into(cache: Path) -> float:
    """Everything the bundled board and ``project --all`` compute, into the empty cache ``cache``; seconds taken."""
    os.environ["VLABENCH_CACHE"] = str(cache)
    from vlabench.analysis import projection_cache
    from vlabench.leaderboard_site.board import projections, reported_energies
    from vlabench.leaderboard_site.reported import reported_entries

    projection_cache.seed_root = lambda: cache / "no-seed"  # compute, never read an older seed
    started = time.perf_counter()
    projections()
    reported_energies(reported_entries())
    return time.perf_counter() - started


def publish(computed: Path, current: dict) -> None:
    """The computed entries and their manifest in place of the committed seed, whole: staged beside it, then renamed
    (an interrupted run leaves the previous seed, or this one, never a mix)."""
    from vlabench.atomic import atomic_write_json, staging_folder

    staging = staging_folder(SEED.parent, "projection-seed-")
    shutil.copytree(computed, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.lock"))
    atomic_write_json(staging / "manifest.json", current)
    previous = SEED.with_name(f"{staging.name}-previous")
    if SEED.exists():
        os.replace(SEED, previous)
    os.replace(staging, SEED)
    shutil.rmtree(previous, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed seed is stale")
    args = parser.parse_args()
    current = manifest()
    if args.check:
        recorded = json.loads((SEED / "manifest.json").read_text()) if (SEED / "manifest.json").is_file() else {}
        stale = sorted(key for key, value in current.items() if recorded.get(key) != value)
        print("projection seed: " + (f"stale ({', '.join(stale)})" if stale else "up to date"))
        return 1 if stale else 0
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder)
        seconds = compute_into(cache)
        publish(cache / "projection", current)
    files = [path for path in SEED.rglob("*.json") if path.name != "manifest.json"]
    size = sum(path.stat().st_size for path in files)
    print(f"projection seed: {len(files)} entries, {size / 1e6:.1f} MB, computed in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
