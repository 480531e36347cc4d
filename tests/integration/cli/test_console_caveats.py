"""The console says what the JSON says: a run judged on its slowest sample (too few samples to bound p99) is never
a bare "MEETS the target", and a served run's feasibility is judged on the latency its robots saw, as its control
block is."""

from __future__ import annotations

from rich.console import Console

from tests.support.paths import DATA
from vlabench.cli.views.run import result_tables
from vlabench.results.schema import RunResult, load_result

RESULTS = DATA / "results"


def shown(result: RunResult) -> str:
    console = Console(width=400, record=True, color_system=None)
    for renderable in result_tables(result):
        console.print(renderable)
    return " ".join(console.export_text().split())


def real(kind: str) -> RunResult:
    return load_result(next((RESULTS / kind).glob("*.json")))


def test_a_target_met_on_too_few_samples_says_so_wherever_it_is_stated():
    result = real("plain")
    assert result.control.meets_target and result.control.judged_on.startswith("not enough samples")
    said = shown(result)
    assert f"MEETS the 10 Hz target caveat: judged on {result.control.judged_on}" in said
    assert f"meets the target at p99 (judged on {result.control.judged_on})" in said


def test_a_bound_p99_needs_no_caveat_and_a_served_runs_feasibility_follows_its_robots():
    result = real("offload")  # 388 requests: p99 bounded; the robots' p99 misses 10 Hz, the server's pass meets it
    assert not result.control.meets_target and result.serving.latency.count >= 368
    said = shown(result)
    assert "MISSES the 10 Hz target" in said and "caveat" not in said
    assert "of the latency its robots saw" in said
    feasible = said[said.index("feasible") :]
    assert feasible.startswith("feasible no") and "inferences/s at p99 < 10 Hz" in feasible
