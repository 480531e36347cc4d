"""Ranking one question at a time (``analysis.question``, ``leaderboard_site.ranking``, ``vlabench rank``): properties
over random boards (hypothesis) and the command's question options; plus the window rule of an offload result."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.support.paths import ROOT
from vlabench.analysis.cet import ExecutionModel
from vlabench.analysis.question import figure, question_of
from vlabench.cli.app import app
from vlabench.leaderboard_site.build import DOWNLOAD_COLUMNS, write_downloads
from vlabench.leaderboard_site.ranking import Filters, rank_rows
from vlabench.results.relations import relation_problems
from vlabench.results.schema import load_result

QUICKSTART = ROOT / "benchmarks" / "results" / "quickstart"
runner = CliRunner()
DEVICES = ("jetson-thor", "jetson-agx-orin-64gb", "rtx-4090", "h100-sxm", "raspberry-pi-5")
QUESTIONS = (("smolvla", 1, 10, 48), ("smolvla", 2, 10, 16), ("pi0", 3, 10, 48))
BASE = {
    **dict(kind="run", provenance="measured", model="smolvla", cameras=1, steps=10, prompt_tokens=48),
    **dict(device="rtx-4090", device_class="desktop-gpu", backend="pytorch-eager", precision="bf16"),
    **dict(approximate=False, deployment="on-robot", valid=True, invalid_reason=None, error_band=None),
    **dict(latency_p50_ms=20.0, latency_p99_ms=25.0, memory_needed_gb=1.0, device_memory_gb=64.0),
    **dict(joules_per_inference=2.0, idle_w=10.0, price_usd=1999.0),
    **dict(lifetime_years=3.0, duty_cycle=0.5, electricity_usd_per_kwh=0.15),
}
"""One hand-written row (figures invented for the tests)."""


@st.composite
def board_rows(draw) -> list[dict]:
    """Random leaderboard rows over three questions: latencies, energy, prices, bands, memory, validity."""
    rows = []
    for index in range(draw(st.integers(2, 14))):
        model, cameras, steps, prompt = draw(st.sampled_from(QUESTIONS))
        p50 = draw(st.floats(5.0, 400.0))
        kind = draw(st.sampled_from(("run", "projected", "reported")))
        rows.append(
            {
                "id": f"row{index}",
                "kind": kind,
                "provenance": {"run": "measured", "projected": "projected", "reported": "reported"}[kind],
                "model": model,
                "cameras": cameras,
                "steps": steps,
                "prompt_tokens": prompt,
                "device": draw(st.sampled_from(DEVICES)),
                "device_class": "jetson",
                "backend": draw(st.sampled_from(("tensorrt", "pytorch-eager"))),
                "precision": draw(st.sampled_from(("bf16", "int8"))),
                "approximate": draw(st.booleans()),
                "deployment": "on-robot",
                "latency_p50_ms": p50,
                "latency_p99_ms": p50 * draw(st.floats(1.0, 1.5)),
                "memory_needed_gb": draw(st.floats(1.0, 10.0)),
                "device_memory_gb": draw(st.sampled_from((8.0, 64.0))),
                "valid": draw(st.sampled_from((True, True, True, False))),
                "invalid_reason": None,
                "joules_per_inference": draw(st.floats(0.1, 50.0)),
                "idle_w": draw(st.floats(1.0, 50.0)),
                "price_usd": draw(st.sampled_from((None, 249.0, 1999.0, 30000.0))),
                "lifetime_years": 3.0,
                "duty_cycle": 0.5,
                "electricity_usd_per_kwh": 0.15,
                "error_band": draw(st.sampled_from((None, 0.1, 0.3))) if kind == "projected" else None,
            }
        )
    return rows


def _ranked(rows, priority="cost", hz=5.0, **options) -> dict[str, dict]:
    return {row["id"]: row for row in rank_rows(rows, priority, hz, ExecutionModel(), **options)}


def _dominates(a: dict, b: dict, ranked: dict[str, dict], priority: str) -> bool:
    """``a`` is at least as good as ``b`` on everything the question judges and ranks, and better on one: it fits
    the device's memory and passed the correctness gate whenever ``b`` did; its p50, p99, J per action and cost (on
    the group's basis) are no higher; the same band."""
    if a["error_band"] != b["error_band"] or (b["valid"] and not a["valid"]):
        return False
    if a["memory_needed_gb"] > a["device_memory_gb"] and b["memory_needed_gb"] <= b["device_memory_gb"]:
        return False
    mine, theirs = ranked[a["id"]], ranked[b["id"]]
    columns = ["latency_p50_ms", "latency_p99_ms", "joules_per_action"]
    pairs = [(mine[c], theirs[c]) for c in columns] + [(figure(mine, "cost"), figure(theirs, "cost"))]
    if any(x is None or y is None for x, y in pairs):
        return False
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


@st.composite
def with_dominators(draw) -> list[dict]:
    """Random rows, and for some of them a row on another device that is at least as good on every input (so often,
    not always, on every figure: a faster device with the same energy per inference idles longer)."""
    rows = draw(board_rows())
    for row in list(rows[: draw(st.integers(1, len(rows)))]):
        better = {name: draw(st.floats(0.5, 1.0)) for name in ("p99", "joules", "idle", "price")}
        better["p50"] = draw(st.floats(0.5, 0.99))
        p50 = row["latency_p50_ms"] * better["p50"]
        rows.append(
            row
            | {
                "id": f"{row['id']}-better",
                "device": draw(st.sampled_from(DEVICES)),
                "latency_p50_ms": p50,
                "latency_p99_ms": max(p50, row["latency_p99_ms"] * better["p99"]),
                "joules_per_inference": row["joules_per_inference"] * better["joules"],
                "idle_w": row["idle_w"] * better["idle"],
                "price_usd": None if row["price_usd"] is None else row["price_usd"] * better["price"],
            }
        )
    return rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=with_dominators(),
    priority=st.sampled_from(("cost", "energy", "time")),
    hz=st.sampled_from((2.0, 10.0, 40.0)),
)
def test_a_dominating_row_is_never_ranked_below_the_one_it_dominates(rows, priority, hz):
    ranked = _ranked(rows, priority, hz)
    for a in rows:
        for b in rows:
            same = question_of(a) == question_of(b) and a["approximate"] == b["approximate"]
            if a is b or not same or (a["backend"], a["precision"]) != (b["backend"], b["precision"]):
                continue
            if _dominates(a, b, ranked, priority) and ranked[b["id"]]["rank"] is not None:
                assert ranked[a["id"]]["rank"] is not None and ranked[a["id"]]["rank"] <= ranked[b["id"]]["rank"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=board_rows(), priority=st.sampled_from(("cost", "energy", "time")))
def test_no_rank_tie_or_pareto_mark_is_computed_across_questions(rows, priority):
    """Each question ranked alone gives the same ranks, ties and Pareto marks as the whole board; every question's
    ranks start at 1 in each group and rise by place unless tied."""
    together = _ranked(rows, priority)
    for question in {question_of(row) for row in rows}:
        alone = _ranked([row for row in rows if question_of(row) == question], priority)
        for key, row in alone.items():
            mine = together[key]
            assert (mine["rank"], mine["tied"], mine["pareto"], mine["question"]) == (
                row["rank"],
                row["tied"],
                row["pareto"],
                row["question"],
            )
        for group in ("exact", "approximate"):
            ranks = sorted(r["rank"] for r in alone.values() if r["rank"] is not None and r["group"] == group)
            assert not ranks or ranks[0] == 1
            for place, rank in enumerate(ranks, start=1):
                assert rank == place or (rank < place and rank in ranks[: place - 1])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(rows=board_rows())
def test_the_json_download_holds_the_ranks_the_ranking_gives(tmp_path, rows):
    ranked = rank_rows(rows, "cost", 10.0, ExecutionModel())
    write_downloads(tmp_path, ranked, "cost", 10.0)
    table = json.loads((tmp_path / "leaderboard.json").read_text())["rows"]
    assert [(row["id"], row["rank"], row["tied"], row["pareto"]) for row in table] == [
        (row["id"], row["rank"], row["tied"], row["pareto"]) for row in ranked
    ]
    assert set(table[0]) == set(DOWNLOAD_COLUMNS)


def test_identical_rows_share_a_rank_and_a_band_ties_its_neighbour():
    base = BASE
    rows = [
        {**base, "id": "a", "device": "rtx-4090"},
        {**base, "id": "b", "device": "rtx-4090"},  # identical: 1= and 1=, never 1 and 2
        {**base, "id": "c", "latency_p50_ms": 30.0, "latency_p99_ms": 35.0, "device": "h100-sxm"},
        {**base, "id": "d", "latency_p50_ms": 34.0, "latency_p99_ms": 36.0, "kind": "projected"}
        | {"provenance": "projected", "error_band": 0.2, "device": "l4"},
    ]
    ranked = _ranked(rows, "time", 10.0)
    assert [(ranked[k]["rank"], ranked[k]["tied"]) for k in "abcd"] == [(1, True), (1, True), (3, True), (3, True)]
    assert ranked["d"]["tied_with"] == "h100-sxm (pytorch-eager)" and ranked["a"]["tied_with"] is None
    assert _ranked(rows, "time", 10.0, filters=Filters(provenance=("measured",)))["c"]["tied"] is False


def test_served_rows_are_gated_under_their_robots_execution():
    rows = [
        {**BASE, "id": "s", "model": "act", "cameras": 1, "steps": 1, "prompt_tokens": 0}
        | {"deployment": "served", "execution": "async", "actions_per_chunk": 10, "valid": True}
        | {"latency_p50_ms": 300.0, "latency_p99_ms": 400.0, "memory_needed_gb": 1.0, "device_memory_gb": 64.0}
    ]
    per_step = _ranked(rows, "time", 10.0)["s"]
    assert per_step["feasible"] and per_step["execution"] == "async"  # 400 ms within 10 actions at 10 Hz
    rows[0]["deployment"] = "on-robot"
    assert not _ranked(rows, "time", 10.0)["s"]["feasible"]  # on the robot: judged per step, as the question asks


def test_rank_never_ranks_across_models_and_names_its_question(tmp_path):
    ranked = runner.invoke(app, ["rank", str(QUICKSTART), "--control-hz", "0.1", "--json"])
    assert ranked.exit_code == 0, ranked.output
    rows = json.loads(ranked.stdout)
    assert {row["model"] for row in rows} == {"smolvla", "act"}
    for model in ("smolvla", "act"):
        ranks = sorted(row["rank"] for row in rows if row["model"] == model and row["rank"] is not None)
        assert ranks[0] == 1
    assert {row["deployment"] for row in rows if row["model"] == "act"} == {"on-robot", "served", "offload"}
    table = runner.invoke(app, ["rank", str(QUICKSTART), "--control-hz", "0.1"], env={"COLUMNS": "240"})
    assert "act · 1 camera · 1 step · 0 prompt tokens: CET ranking" in table.stdout
    assert "smolvla · 1 camera · 10 steps · 48 prompt tokens: CET ranking" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "smolvl"], "Unknown model 'smolvl'. Did you mean 'smolvla'?"),
        (["--device-class", "jetsn"], "Unknown device class 'jetsn'."),
        (["--deployment", "cloud"], "Valid deployments: offload, on-robot, served."),
        (["--provenance", "guessed"], "Unknown provenance 'guessed'."),
        (["--model", "act", "--steps", "7"], "no row answers act · 1 camera · 7 steps · 0 prompt tokens"),
    ],
)
def test_rank_refuses_an_unknown_question_clearly(args, message):
    result = runner.invoke(app, ["rank", str(QUICKSTART), *args], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


def test_an_offload_result_compares_its_serving_with_the_robots_window():
    """``run --remote`` with the default 10 s of serving: the server's baseline pass (123 s here) ran before the
    robots' window, so the rule compares the window with the serving duration; a serving block longer than its
    window is still refused."""
    result = load_result(QUICKSTART / "act-cpu-offload.json")
    assert result.serving.transport == "grpc" and result.timing.timed_duration_s > 100 > result.serving.duration_s
    assert relation_problems(result) == []
    stretched = result.model_copy(update={"serving": result.serving.model_copy(update={"duration_s": 60.0})})
    assert any(
        field == "serving.duration_s" and "timed within the run" in text for field, text in relation_problems(stretched)
    )
    served = load_result(QUICKSTART / "act-cpu-served.json")  # in-process: its timing ran inside its own window
    long = served.model_copy(update={"timing": served.timing.model_copy(update={"timed_duration_s": 1e5})})
    assert any(field == "timing.timed_duration_s" for field, _ in relation_problems(long))


def test_served_and_offload_rows_are_keyed_by_robots_batch_and_execution():
    """16 served results of one model and device were 4 rows, two offload runs one: each configuration of robots,
    largest batch and execution model is a row of its own."""
    from vlabench.leaderboard_site.rows import row_key

    served = load_result(QUICKSTART / "act-cpu-served.json")
    offload = load_result(QUICKSTART / "act-cpu-offload.json")
    keys = {row_key(served), row_key(offload)}
    for change in ({"robots": 8}, {"max_batch": 2}, {"execution": "async"}):
        keys.add(row_key(served.model_copy(update={"serving": served.serving.model_copy(update=change)})))
    assert len(keys) == 5
