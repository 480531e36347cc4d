"""Scale of the leaderboard site: the bundled site's build time and first-visit bytes, and the build from many synthetic
(but valid) results.

    python benchmarks/site_scale.py --bundled [--repeats 3]        # the bundled site, measured (JSON on stdout)
    python benchmarks/site_scale.py [--results 1000] [--seed 0] [--keep DIR]

``--bundled`` builds the bundled leaderboard (``vlabench site build`` with no folder: the results this checkout ships,
the published rows and the projections) ``--repeats`` times, the first one with an empty projection cache (the
projection model traced and fitted afresh, as on a new machine) and the others with it filled; then serves the site on
127.0.0.1 and opens it in Chromium (Playwright, Debian's chromium): the bytes of every response until the page has
ranked its rows (the first screen), then after scrolling to the charts (plotly.js's basic bundle loads then: the first
visit), and the time from navigation to the ranked rows. The committed artifact is
``benchmarks/results/site-scale.json`` (``benchmarks/capture.py`` records the load average beside it).

Without ``--bundled``, the results are one real result file (``tests/data/artifacts``) with a real roofline block
(``benchmarks/results``) copied with a seeded RNG into new run ids, models, devices, backends, precisions, optimizations
and latencies; no benchmark runs. The distribution is skewed the way a real results folder is: 40 % of the runs on one
device (the development host), the others spread over every packaged device profile. Prints the build time, the site's
total size, the number of files and the largest page; ``tests/integration/leaderboard_site/test_site_scale.py``
asserts the size budgets (never the time: timing claims belong here).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from vlabench.analysis.cet import CostAssumptions, ExecutionModel, cost_report
from vlabench.hardware.devices import load_device_profile

ROOT = Path(__file__).resolve().parents[1]
SOURCE = (
    ROOT / "tests" / "data" / "artifacts" / "20261201T042521Z_smolvla-tiny_generic-x86-cpu_torch_fp32_c87a67ed.json"
)
ROOFLINE = ROOT / "benchmarks" / "results" / "roofline-pi0-rtx-4090-bf16.json"
"""A real roofline block that can be drawn (the result file's own has no ceiling to draw against)."""
MODELS = sorted(p.stem for p in (ROOT / "profiles" / "models").glob("*.yaml"))
DEVICES = sorted(p.stem for p in (ROOT / "profiles" / "devices").glob("*.yaml"))
HOST_DEVICE = "generic-x86-cpu"
BACKENDS = ("torch", "torch-compile", "onnxruntime", "openvino", "tensorrt")
PRECISIONS = ("fp32", "fp16", "bf16")
STATS = ("mean", "p50", "p90", "p99", "min", "max", "stdev")


def base_result() -> dict:
    """The real result as schema 1.1 with an estimated energy block and its cost (the file has neither)."""
    data = json.loads(SOURCE.read_text())
    data = {"kind": "run", **data, "schema_version": "1.1"}
    data["device"].update(price_usd=500.0, engine="cpu")  # the engine recorded: the run executed where it says
    data["energy"] = {
        "label": "estimated",
        "method": "tdp-utilization",
        "scope": "device",
        "sampling_period_s": None,
        "meter": {},
        "idle_window_s": 0.2,
        "idle_w": 5.0,
        "window_s": 1.5,
        "window_inferences": 1,  # the file's end-to-end inference takes over a second
        "notes": [],
    }
    set_power(data, 12.0)
    data["cost"] = None
    data["roofline"] = json.loads(ROOFLINE.read_text())["report"]
    return data


def set_power(data: dict, average_w: float) -> None:
    """The energy block at ``average_w`` over its window: per inference, per action (one per inference: the file
    is gated per step) and above idle, as the meters' readings make them."""
    energy = data["energy"]
    seconds_per_inference = energy["window_s"] / energy["window_inferences"]
    energy.update(
        average_w=average_w,
        joules_per_inference=average_w * seconds_per_inference,
        joules_per_action=average_w * seconds_per_inference,
        dynamic_joules_per_inference=(average_w - energy["idle_w"]) * seconds_per_inference,
    )


def with_cost(data: dict) -> dict:
    energy, e2e = data["energy"], data["timing"]["phases"]["e2e"]
    report = cost_report(
        price_usd=data["device"]["price_usd"],
        price_source="--price-usd",
        price_estimate=False,
        joules_per_inference=energy["joules_per_inference"],
        idle_w=energy["idle_w"],
        energy_label=energy["label"],
        latency_p50_ms=e2e["p50"],
        control_hz=10.0,
        execution=ExecutionModel(),
        assumptions=CostAssumptions(),
    )
    data["cost"] = json.loads(report.model_dump_json())
    return data


def scale_timing(timing: dict, factor: float) -> None:
    """Every latency of the result times ``factor`` (statistics, samples and the timed duration: their order and
    their relations are kept)."""
    for stats in [*timing["phases"].values(), *timing["denoise_steps"]]:
        for name in STATS:
            stats[name] *= factor
    for name, samples in timing["samples_ms"].items():
        timing["samples_ms"][name] = [value * factor for value in samples]
    timing["first_inference_ms"] *= factor
    timing["timed_duration_s"] *= factor


def synthetic_results(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` valid result files under ``folder``, reproducible from ``seed``."""
    rng = random.Random(seed)
    base = base_result()
    started = datetime(2026, 12, 1, tzinfo=timezone.utc)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for index in range(count):
        data = json.loads(json.dumps(base))
        data["run_id"] = uuid.UUID(int=rng.getrandbits(128)).hex
        device = HOST_DEVICE if rng.random() < 0.4 else rng.choice(DEVICES)
        data["model"]["name"] = rng.choice(MODELS)
        data["device"].update(profile=device, price_usd=round(rng.uniform(50, 40_000), 2))
        data["backend"], data["precision"] = rng.choice(BACKENDS), rng.choice(PRECISIONS)
        data["config_hash"] = f"{index:016x}"
        moment = started + timedelta(minutes=index)
        data["started_utc"] = moment.isoformat()
        factor = rng.lognormvariate(-2.0, 1.5)
        scale_timing(data["timing"], factor)
        data["energy"]["window_s"] *= factor  # the same inferences at the new latency
        data["finished_utc"] = (moment + timedelta(seconds=30 + data["timing"]["timed_duration_s"])).isoformat()
        set_power(data, round(rng.uniform(0.2, 1.0) * device_tdp(device), 3))
        if rng.random() < 0.2:
            data["optimization"] = {
                "dp_cache": {"steps": 10, "computed": [0, 2, 4, 6, 8], "source": "{0,2,4,6,8}", "calibration": None},
                "fuse_expert_kv": rng.random() < 0.5,
                "dp_cache_error": {"max_abs": 0.1, "rmse": 0.03, "cosine": 0.999, "relative": 0.05, "samples": 1},
            }
        path = folder / f"{index:05d}_{data['run_id'][:8]}.json"
        path.write_text(json.dumps(with_cost(data), indent=2))
        written.append(path)
    return written


def device_tdp(name: str) -> float:
    """The device profile's TDP, or the 12 W the base result's estimate assumes for a profile with none."""
    tdp = load_device_profile(name).tdp_w
    return tdp.value if tdp is not None else 12.0


def site_sizes(site: Path) -> dict:
    files = [p for p in site.rglob("*") if p.is_file()]
    pages = [p for p in files if p.suffix == ".html"]
    largest = max(pages, key=lambda p: p.stat().st_size)
    return {
        "files": len(files),
        "pages": len(pages),
        "total_mb": sum(p.stat().st_size for p in files) / 1e6,
        "largest_page": str(largest.relative_to(site)),
        "largest_page_kb": largest.stat().st_size / 1e3,
        "index_kb": (site / "index.html").stat().st_size / 1e3,
    }


FIRST_VISIT_BUDGET = 1_500_000
FIRST_SCREEN_BUDGET = 1_000_000
CHROMIUM = Path("/usr/bin/chromium")


def bundled_builds(out: Path, repeats: int) -> list[float]:
    """Seconds per build of the bundled site: the first with an empty projection cache, the others warm."""
    from vlabench.leaderboard_site.build import build_site

    times = []
    cache = Path(tempfile.mkdtemp(prefix="site-scale-cache-"))
    previous = os.environ.get("VLABENCH_CACHE")
    os.environ["VLABENCH_CACHE"] = str(cache)
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            build_site([], out, projected=True)
            times.append(time.perf_counter() - start)
    finally:
        if previous is None:
            os.environ.pop("VLABENCH_CACHE")
        else:
            os.environ["VLABENCH_CACHE"] = previous
        shutil.rmtree(cache, ignore_errors=True)
    return times


def first_visit(site: Path) -> dict:
    """Bytes the browser fetches for the landing page over loopback HTTP: until the rows are ranked (first screen),
    and after the charts are drawn (first visit); per file, and the time to the ranked rows."""
    from playwright.sync_api import sync_playwright

    from vlabench.leaderboard_site.serve import make_server

    server = make_server(site, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{server.server_address[1]}/"
    responses: list = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("response", lambda response: responses.append(response))
            start = time.perf_counter()
            page.goto(root + "index.html")
            page.wait_for_selector("body[data-ready]")
            ready_ms = (time.perf_counter() - start) * 1000.0
            page.wait_for_load_state("networkidle")
            first = len(responses)
            page.evaluate("document.getElementById('charts').scrollIntoView()")
            page.wait_for_function("document.querySelectorAll('#charts .js-plotly-plot').length === 3")
            page.wait_for_load_state("networkidle")
            sizes = [(r.url.removeprefix(root), len(r.body()) if r.ok else 0) for r in responses]
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    fetched = dict(sizes)
    first_screen = dict(sizes[:first])
    return {
        "first_screen_bytes": sum(first_screen.values()),
        "first_visit_bytes": sum(fetched.values()),
        "files": fetched,
        "ready_ms": round(ready_ms),
        "first_screen_budget_bytes": FIRST_SCREEN_BUDGET,
        "first_visit_budget_bytes": FIRST_VISIT_BUDGET,
    }


def bundled(repeats: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="site-scale-bundled-"))
    try:
        times = bundled_builds(work / "site", repeats)
        marker = json.loads((work / "site" / "vlabench-site.json").read_text())
        warm = times[1:]
        return {
            "rows": marker["rows"],
            "runs": marker["runs"],
            "pages": len(list((work / "site").rglob("*.html"))),
            "build_cold_s": round(times[0], 2),
            "build_warm_s": [round(t, 2) for t in warm],
            "build_warm_median_s": round(statistics.median(warm), 2) if warm else None,
            **first_visit(work / "site"),
            "cpu_count": os.cpu_count(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    from vlabench.leaderboard_site.build import build_site

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundled", action="store_true", help="measure the bundled site (build time, first visit)")
    parser.add_argument("--repeats", type=int, default=3, help="--bundled: builds (the first one cold)")
    parser.add_argument("--results", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="build the site here (default: a temporary folder, removed)")
    args = parser.parse_args()
    if args.bundled:
        print(json.dumps(bundled(max(1, args.repeats)), indent=2))
        return
    work = Path(tempfile.mkdtemp(prefix="site-scale-"))
    try:
        synthetic_results(work / "results", args.results, args.seed)
        out = args.keep or work / "site"
        start = time.perf_counter()
        report = build_site([work / "results"], out)
        elapsed = time.perf_counter() - start
        print(
            json.dumps(
                {
                    "results": args.results,
                    "runs": report.runs,
                    "rows": report.rows,
                    "build_s": round(elapsed, 1),
                    **site_sizes(out),
                },
                indent=2,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
