"""The memory estimate against what runs really use: each workload runs in its own child process, whose peak RSS
(``VmHWM``) minus its peak once it has only planned the run (interpreter, torch, vlabench, the planner: everything up
to the fit check, read before the run starts) is what the run added. The estimate must never be below that, and at most
``MAX_OVER`` times it. Absurd workloads are refused (exit 4, or 2 when a range check fires first) before any
allocation: their child never grows past ``REFUSAL_RSS``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.fast_run import FAST_RUN

MAX_OVER = 4.0
"""The estimate may exceed the measured increment by this factor (it is conservative: attention scores, the
runtime's arena and the input copies are counted at their worst)."""
REFUSAL_RSS = 2 * 2**30
MIB = 2**20
FLOOR = 32 * MIB  # below this a run's RSS increment over planning is not a measurement

CHILD = textwrap.dedent(
    """
    import json, sys
    settings = json.loads(sys.argv[1])
    import vlabench.commands.run as run
    import vlabench.commands.run.plan as planning
    from vlabench.commands.run import save_result
    from vlabench.config import RunConfig

    chunk = settings.pop("chunk", None)
    if chunk:  # a variant of the model whose action head is built for this chunk
        load = planning.load_model_spec
        def variant(name):
            spec = load(name)
            action = spec.action.model_copy(update={"chunk": chunk, "actions_per_chunk": chunk})
            return spec.model_copy(update={"action": action})
        planning.load_model_spec = variant
    def high_water_mark():  # VmHWM: this process's own (ru_maxrss would carry the parent's from before exec)
        status = open("/proc/self/status").read()
        return int(status.split("VmHWM:")[1].split()[0]) * 1024

    config = RunConfig(**settings)
    plans, _ = run.plan_runs(config)
    planned = high_water_mark()  # the peak of a process that only planned this run
    for result in run.execute_many(plans):
        save_result(result, config.out)
    estimate = sum(plan.footprint.total_bytes for plan in plans)
    print(json.dumps({"estimate": estimate, "planned": planned, "peak": high_water_mark()}))
    """
)
WORKLOADS = [
    {"model": "smolvla-tiny"},
    {"model": "smolvla-tiny", "chunk": 4096, "steps": 2},
    {"model": "pi0-tiny", "cameras": 8},
    {"model": "pi0-tiny", "cameras": 256},
    {"model": "pi0-tiny", "cameras": 8, "chunk": 2048, "steps": 2},
    {"model": "smolvla-tiny", "backend": "onnxruntime", "chunk": 1024, "steps": 2},
]


def measure(workload: dict, out: str) -> tuple[int, int]:
    """(estimate, peak RSS the run added over planning it), from one child that plans, then runs."""
    settings = {**FAST_RUN.fields(device="cpu"), **workload, "out": out}
    process = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(settings)], capture_output=True, text=True, timeout=600
    )
    assert process.returncode == 0, process.stderr[-3000:]
    run = json.loads(process.stdout.strip().splitlines()[-1])
    return run["estimate"], run["peak"] - run["planned"]


def test_the_estimate_covers_the_peak_rss_of_every_workload_within_a_factor(tmp_path):
    pytest.importorskip("onnxruntime")
    with ThreadPoolExecutor(2) as pool:
        measured = list(pool.map(lambda w: measure(w, str(tmp_path / "out")), WORKLOADS))
    rows = [
        f"{json.dumps(w):70s} estimate {e / MIB:8.1f} MiB  measured {m / MIB:8.1f} MiB  ×{e / max(m, 1):.2f}"
        for w, (e, m) in zip(WORKLOADS, measured, strict=True)
    ]
    print("\n" + "\n".join(rows))
    for row, (estimate, increment) in zip(rows, measured, strict=True):
        assert estimate >= increment, f"under-estimate: {row}"
        # The increment is over a process that planned the same run; planning traces the model with the workload's
        # inputs when they are small enough for free memory, so on a busy host planning can peak as high as the run
        # (increment ≈ 0). The ratio is judged only where the run added a measurable amount (≥ FLOOR).
        if increment >= FLOOR:
            assert estimate <= MAX_OVER * increment, f"more than {MAX_OVER}× the measured increment: {row}"
    assert any(increment >= FLOOR for _, increment in measured), "no workload added a measurable amount: " + str(rows)


REFUSING = textwrap.dedent(
    """
    import resource, subprocess, sys
    code = subprocess.run([sys.executable, "-m", "vlabench", "run", *sys.argv[1:]], capture_output=True).returncode
    print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    """
)


@pytest.mark.parametrize(
    ("model", "flags"),
    [
        ("smolvla-tiny", ["--chunk", "100000000"]),
        ("pi0-tiny", ["--cameras", "65536"]),  # analytic family: prefill over a million tokens
        ("gr00t-n1.5-tiny", ["--cameras", "65536"]),  # traced family: its inputs alone would be 1.5 GB to trace
        ("act-tiny", ["--cameras", "65536"]),
    ],
)
def test_an_absurd_workload_is_refused_before_anything_is_allocated(tmp_path, model, flags):
    arguments = ["-m", model, *flags, "-d", "cpu", "--energy-meter", "none", "-o", str(tmp_path)]
    process = subprocess.run([sys.executable, "-c", REFUSING, *arguments], capture_output=True, text=True, timeout=300)
    code, peak = map(int, process.stdout.split())
    assert code in (2, 4), process.stdout
    assert peak < REFUSAL_RSS, f"the refused run grew to {peak / MIB:.0f} MiB"
