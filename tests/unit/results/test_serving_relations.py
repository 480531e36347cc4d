"""The relations of a served result (``results.serving_relations``): real served results (``tests/data/serving``)
satisfy every one, and each forged figure (robots seeing a tenth of the server's inference, a hundred times the
actions the requests allow, a mean batch beyond the maximum, 500 robots with two entries, a busy share above one,
energy or cost that is not the window's, a capacity that did not pass) is refused with its rule named."""

from __future__ import annotations

import pytest

from tests.support import paths
from vlabench.results.relations import relation_problems
from vlabench.results.schema import RunResult, load_result
from vlabench.results.validate import Requirements, validate_file

DATA = paths.DATA / "serving"
FILES = sorted(DATA.glob("*.json"))


@pytest.fixture(scope="module")
def results() -> dict[str, RunResult]:
    return {path.stem: load_result(path) for path in FILES}


@pytest.mark.parametrize("name", [path.stem for path in FILES])
def test_real_served_results_satisfy_every_relation(results, name):
    assert relation_problems(results[name]) == []


def changed(result: RunResult, **serving) -> RunResult:
    return result.model_copy(update={"serving": result.serving.model_copy(update=serving)})


def stats(block, **values):
    return block.model_copy(update=values)


FORGERIES = {
    "a tenth of the server's inference": (
        "served-in-process",
        lambda r: changed(r, latency=stats(r.serving.latency, **{k: getattr(r.serving.inference, k) / 10 for k in
                                                                   ("min", "p50", "p90", "p99", "max", "mean")})),
        "serving.latency",
        "robots see the server's time",
    ),
    "a hundred times the actions": (
        "served-in-process",
        lambda r: changed(r, actions_per_s=r.serving.actions_per_s * 100),
        "serving.actions_per_s",
        "rate = count / window",
    ),
    "more requests than robots ask": (
        "served-in-process",
        lambda r: changed(r, requests=r.serving.requests * 100, per_robot=[
            robot.model_copy(update={"requests": robot.requests * 100}) for robot in r.serving.per_robot]),
        "serving.requests",
        "requests the robots ask",
    ),
    "a mean batch fifty times the maximum": (
        "served-in-process",
        lambda r: changed(r, mean_batch=r.serving.max_batch * 50),
        "serving.mean_batch",
        "batch size",
    ),
    "500 robots with two entries": (
        "offload-wifi",
        lambda r: changed(r, robots=500, per_robot=r.serving.per_robot[:2]),
        "serving.per_robot",
        "every robot asks",
    ),
    "requests not the robots'": (
        "offload-wifi",
        lambda r: changed(r, requests=r.serving.requests + 1),
        "serving.requests",
        "requests = robots' requests",
    ),
    "a busy share that is not the batches'": (
        "served-in-process",
        lambda r: changed(r, busy_fraction=min(1.0, r.serving.busy_fraction * 1.5)),
        "serving.busy_fraction",
        "busy share = busy time / window",
    ),
    "batches longer than the window": (
        "offload-wifi",
        lambda r: changed(r, duration_s=r.serving.busy_s / 2, busy_fraction=1.0),
        "serving.busy_s",
        "batches within the window",
    ),
    "overlapping batches": (
        "served-in-process",
        lambda r: changed(r, batch_log=r.serving.batch_log.model_copy(
            update={"start_ms": [0.0] * len(r.serving.batch_log.start_ms)})),
        "serving.batch_log.start_ms",
        "batches one after another",
    ),
    "a batch beyond the maximum": (
        "served-in-process",
        lambda r: changed(r, batch_log=r.serving.batch_log.model_copy(
            update={"size": [9, *r.serving.batch_log.size[1:]]})),
        "serving.batch_log.0",
        "a batch:",
    ),
    "a batch log of the wrong length": (
        "offload-wifi",
        lambda r: changed(r, batches=r.serving.batches + 1),
        "serving.batch_log",
        "one entry per batch",
    ),
    "energy that is not the batches' and the idle time's": (
        "served-in-process",
        lambda r: changed(r, energy=r.serving.energy.model_copy(update={"joules": r.serving.energy.joules * 3})),
        "serving.energy.joules",
        "window = batches + idle",
    ),
    "batch energy that ignores the batches' durations": (
        "served-in-process",
        lambda r: changed(r, batch_log=r.serving.batch_log.model_copy(update={"joules": [
            sum(r.serving.batch_log.joules) / len(r.serving.batch_log.joules)] * len(r.serving.batch_log.joules)})),
        "serving.batch_log.joules",
        "a batch's energy follows its duration",
    ),
    "idle energy beyond idle power": (
        "offload-wifi",
        lambda r: changed(r, energy=r.serving.energy.model_copy(update={"idle_w": r.serving.energy.idle_w / 10})),
        "serving.energy.idle_joules",
        "idle share ≤ idle power",
    ),
    "energy per action not the window's": (
        "served-in-process",
        lambda r: changed(r, joules_per_action=r.serving.joules_per_action / 8),
        "serving.joules_per_action",
        "energy per action = window's joules / actions",
    ),
    "a cost that is not the window's": (
        "served-in-process",
        lambda r: r.model_copy(update={"cost": r.cost.model_copy(update={"busy_fraction": 2.0})}),
        "cost.busy_fraction",
        "cost of the window served",
    ),
    "a dollar figure that is not the window's": (
        "offload-wifi",
        lambda r: r.model_copy(update={"cost": r.cost.model_copy(update={"usd_per_robot_hour": 1.0})}),
        "cost.usd_per_robot_hour",
        "cost of the window served",
    ),
    "a stall longer than any reply": (
        "served-in-process",
        lambda r: changed(r, stall=stats(r.serving.stall, max=r.serving.latency.max * 3)),
        "serving.stall.max",
        "a stall within its reply",
    ),
    "parts longer than the whole": (
        "offload-wifi",
        lambda r: changed(r, queue=stats(r.serving.queue, mean=r.serving.latency.mean * 2)),
        "serving.split_ms",
        "parts within the whole",
    ),
    "a capacity that did not pass": (
        "capacity-search",
        lambda r: changed(r, capacity_robots=5),
        "serving.capacity_robots",
        "capacity = the largest count that passed",
    ),
    "a count passed over its budget": (
        "capacity-search",
        lambda r: changed(r, capacity=r.serving.capacity.model_copy(update={"steps": [
            step.model_copy(update={"worst_p99_ms": 5000.0}) for step in r.serving.capacity.steps]})),
        "serving.capacity.steps.0",
        "a count passes on its slowest robot's p99",
    ),
    "a partial window in a complete result": (
        "offload-wifi",
        lambda r: changed(r, status="partial", stopped="robots failed: lost"),
        "status",
        "a result whose serving window ended early is partial",
    ),
    "a partial result that does not say why": (
        "served-in-process",
        lambda r: r.model_copy(update={"status": "partial"}),
        "partial_reason",
        "a partial result says why",
    ),
    "served longer than the run": (
        "served-in-process",
        lambda r: r.model_copy(update={"finished_utc": r.started_utc}),
        "serving.duration_s",
        "served within the run",
    ),
}  # fmt: skip


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forged_served_figure_is_refused_with_its_rule_named(results, forgery):
    name, forge, field, rule = FORGERIES[forgery]
    found = relation_problems(forge(results[name]))
    assert any(where.startswith(field) and rule in message for where, message in found), found


def test_a_served_result_of_schema_1_5_keeps_its_own_energy_accounting(results):
    """Before 1.6 the serving block's joules per action was the energy pass's over the mean batch, with no window
    energy or batch log: such files still read, held to that accounting, and their window relations are not asked
    of them."""
    current = results["served-in-process"]
    old = current.model_copy(update={"schema_version": "1.5"})
    actions = current.serving.mean_batch * current.control.execution_model().actions_per_inference
    per_action = current.energy.joules_per_inference / actions
    old = changed(old, energy=None, batch_log=None, busy_s=None, busy_fraction=None, joules_per_action=per_action)
    assert relation_problems(old) == []
    forged = changed(old, joules_per_action=per_action * 3)
    assert [field for field, _ in relation_problems(forged)] == ["serving.joules_per_action"]
    assert any(field == "serving.joules_per_action" for field, _ in relation_problems(changed(current, energy=None)))


def test_a_partial_result_is_flagged_by_validate(tmp_path, results):
    source = results["offload-wifi"]
    partial = source.model_copy(update={"status": "partial", "partial_reason": "robots failed: lost"}).model_copy(
        update={"serving": source.serving.model_copy(update={"status": "partial", "stopped": "robots failed: lost"})}
    )
    path = tmp_path / "partial.json"
    path.write_text(partial.model_dump_json())
    problems = validate_file(path, Requirements(min_iterations=1, min_duration_s=0, allow_dirty=True))
    assert [problem.message for problem in problems if problem.field == "status"] == [
        "partial: robots failed: lost (kept, not fit for publication)"
    ]


def test_a_count_that_served_nothing_fails_the_capacity_search_without_ending_it(results):
    from vlabench.analysis.cet import ExecutionModel
    from vlabench.commands.run import search
    from vlabench.config import RunConfig

    served = results["served-in-process"].serving

    def serve_at(robots: int):
        if robots > 1:
            raise ValueError("no request was served: 2 request(s) still unanswered when the window closed")
        return served.model_copy(update={"robots": robots})

    config = RunConfig(robots="auto", max_robots=8, control_hz=0.1)
    record, at = search(config, serve_at, lambda block: (block, None), ExecutionModel())
    assert [(step.robots, step.passed) for step in record.steps] == [(1, True), (2, False)]
    assert "still unanswered" in record.steps[1].reason and record.capacity_robots == 1
    assert at.capacity_robots == 1 and at.capacity == record
    nothing, none = search(config, lambda robots: serve_at(2), lambda block: (block, None), ExecutionModel())
    assert none is None and nothing.capacity_robots == 0 and not nothing.steps[0].passed
