"""The task-success block of a fidelity artifact: every derived figure is recomputed on reading (a tampered file is
refused), the mark, and how leaderboard rows take a success for their configuration."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from vlabench.errors import InputError
from vlabench.measure.dp_cache import parse_schedule
from vlabench.measure.proportions import wilson_interval
from vlabench.measure.stats import summarize
from vlabench.results.artifacts import load_artifact
from vlabench.results.fidelity_artifact import FidelityReport
from vlabench.results.schema import load_result
from vlabench.results.task_success import (
    TaskSuccessReport,
    compared,
    optimization_label,
    task_outcomes,
    variant_success,
)
from vlabench.results.task_success_rows import (
    SUCCESS_FIELDS,
    cells,
    load_task_success,
    mark_speed_success_front,
    run_configuration,
)

QUICKSTART = ROOT / "benchmarks" / "results" / "quickstart" / "smolvla-cpu.json"

TASKS = {"reach-v3": "reach", "door-close-v3": "close the door"}
STAMP = "/ckpt/model.safetensors:3800008:1"
RMUSCLE = parse_schedule("{0,1,2,6,8,9}", 10)


def _variant(name: str, outcomes: dict[str, str], cycle_ms: float | None, **fields):
    tasks = [task_outcomes(task, [c == "1" for c in text], [100] * len(text)) for task, text in outcomes.items()]
    defaults = {"backend": "torch", "precision": "fp32", "optimization": "none", "steps": 10}
    cycle = summarize([cycle_ms, cycle_ms * 1.1, cycle_ms * 0.9]) if cycle_ms else None
    return variant_success(name, tasks, cycle_ms=cycle, **{**defaults, **fields})


def report(broken: str = "0000000000") -> TaskSuccessReport:
    reference = _variant("reference", {"reach-v3": "1111111110", "door-close-v3": "1111111111"}, 10.0)
    rows = [
        reference,
        _variant(
            "dp-cache",
            {"reach-v3": "1111111100", "door-close-v3": "1111111111"},
            6.0,
            optimization=optimization_label(RMUSCLE, False),
            dp_cache=RMUSCLE,
        ),
        _variant("broken", {"reach-v3": broken, "door-close-v3": broken}, 5.0, precision="int8"),
    ]
    baseline = {"backend": None, "precision": None, "steps": None}
    expert = _variant("scripted expert", {"reach-v3": "1" * 10, "door-close-v3": "1" * 10}, None, **baseline)
    floor = _variant("random actions", {"reach-v3": "0" * 10, "door-close-v3": "0" * 10}, None, **baseline)
    return TaskSuccessReport(
        benchmark="Meta-World v3",
        episodes_from="MT1 seed 0",
        device="cpu",
        checkpoint=STAMP,
        checkpoint_sha256="0" * 64,
        tasks=TASKS,
        camera="corner3",
        image_size=64,
        max_steps=200,
        chunk=10,
        actions_per_chunk=5,
        seed=0,
        threads=1,
        reference="reference",
        expert=compared(expert, reference),
        random=compared(floor, reference),
        variants=[compared(row, reference) for row in rows],
    )


def fidelity(success: TaskSuccessReport, minutes: int = 0) -> FidelityReport:
    when = datetime(2026, 12, 4, tzinfo=timezone.utc) + timedelta(minutes=minutes)
    return FidelityReport(
        started_utc=when,
        finished_utc=when,
        model="smolvla-metaworld-tiny",
        provenance=load_result(QUICKSTART).provenance,
        seed=0,
        open_loop=[],
        closed_loop=[],
        task_success=success,
    )


def test_a_broken_variant_is_marked_below_the_reference_and_its_difference_excludes_zero():
    success = report()
    broken = success.row("broken")
    assert broken.below_reference and broken.interval[1] < success.row("reference").interval[0]
    assert broken.difference == pytest.approx(-0.95) and broken.difference_interval[1] < 0
    assert not success.row("dp-cache").below_reference
    assert success.row("dp-cache").speedup == pytest.approx(10.0 / 6.0)
    assert success.row("reference").difference == 0.0 and success.row("reference").speedup == 1.0


def test_a_variant_within_the_references_interval_is_not_marked():
    assert not report(broken="1111111011").row("broken").below_reference


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("variants", 2, "tasks", 0, "successes"), 3, "outcomes hold"),
        (("variants", 2, "tasks", 0, "interval"), [0.0, 0.5], "Wilson"),
        (("variants", 2, "success_rate"), 0.5, "success rate"),
        (("variants", 2, "below_reference"), False, "below_reference"),
        (("variants", 2, "difference"), 0.0, "difference"),
        (("variants", 2, "difference_interval"), [-0.1, 0.1], "paired interval"),
        (("variants", 1, "speedup"), 3.0, "speedup"),
        (("reference",), "missing", "reference"),
    ],
)
def test_a_file_whose_figures_contradict_its_outcomes_is_refused(tmp_path, path, value, message):
    document = json.loads(fidelity(report()).model_dump_json())
    node = document["task_success"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    file = tmp_path / "x.fidelity.json"
    file.write_text(json.dumps(document))
    with pytest.raises(InputError, match=message):
        load_artifact(file)
    found, skipped = load_task_success([tmp_path])
    assert found == [] and len(skipped) == 1 and str(file) in skipped[0]  # the leaderboard says why


def test_outcomes_must_be_ones_and_zeros():
    with pytest.raises(ValueError):
        task_outcomes("reach-v3", [], [])


def test_optimization_labels_are_one_phrase():
    assert optimization_label(None, False) == "none"
    assert optimization_label(RMUSCLE, True) == "dp-cache {0,1,2,6,8,9} of 10 + fuse-expert-kv"
    assert optimization_label(None, False, 5) == "v-aefusion s=5"


def _run(backend: str = "torch", precision: str = "int8", checkpoint: str | None = STAMP, dp_cache=None):
    result = load_result(QUICKSTART)
    optimization = result.optimization.model_copy(update={"dp_cache": dp_cache}) if result.optimization else None
    return result.model_copy(
        update={
            "model": result.model.model_copy(update={"name": "smolvla-metaworld-tiny", "checkpoint": checkpoint}),
            "device": result.device.model_copy(update={"profile": "cpu"}),
            "backend": backend,
            "precision": precision,
            "optimization": optimization,
        }
    )


def test_a_run_takes_the_success_of_its_configuration_and_seeded_weights_take_none(tmp_path):
    from vlabench.results.task_success_rows import success_fields

    for minutes, success in ((0, report(broken="1111111111")), (5, report())):  # the later artifact wins
        path = tmp_path / f"{minutes}.fidelity.json"
        path.write_text(fidelity(success, minutes).model_dump_json())
    found = cells(load_task_success([tmp_path])[0])
    fields = success_fields(_run(), found)
    assert set(fields) == set(SUCCESS_FIELDS)
    assert fields["task_success"] == 0.0 and fields["task_success_below_reference"] is True
    assert (fields["task_success_low"], fields["task_success_high"]) == pytest.approx(wilson_interval(0, 20))
    assert success_fields(_run(checkpoint=None), found) == {}  # seeded weights
    assert run_configuration(_run(checkpoint=None)) is None
    assert success_fields(_run(precision="bf16"), found) == {}  # never measured
    assert success_fields(_run(checkpoint="/other:1:2"), found) == {}  # other weights


def test_the_speed_success_front_keeps_rows_no_other_beats_on_both():
    rows = [
        {"model": "m", "device": "cpu", "latency_p50_ms": 10.0, "task_success": 0.9},
        {"model": "m", "device": "cpu", "latency_p50_ms": 5.0, "task_success": 0.9},  # dominates the first
        {"model": "m", "device": "cpu", "latency_p50_ms": 4.0, "task_success": 0.5},
        {"model": "m", "device": "cpu", "latency_p50_ms": 6.0, "task_success": 0.4},  # dominated by the third
        {"model": "m", "device": "gpu", "latency_p50_ms": 99.0, "task_success": 0.1},  # alone on its device
        {"model": "m", "device": "cpu", "latency_p50_ms": 1.0, "task_success": None},
    ]
    mark_speed_success_front(rows)
    assert [row.get("speed_success_front") for row in rows] == [False, True, True, False, True, None]


def test_fidelity_files_without_task_success_are_passed_over(tmp_path):
    plain = fidelity(report()).model_copy(update={"task_success": None})
    (tmp_path / "a.fidelity.json").write_text(plain.model_dump_json())
    (tmp_path / "b.json").write_text(json.dumps({"kind": "run"}))
    assert load_task_success([Path(tmp_path)]) == ([], [])


def test_a_leaderboard_row_of_the_run_carries_its_success(tmp_path):
    from vlabench.leaderboard_site.rows import Run, run_rows

    (tmp_path / "a.fidelity.json").write_text(fidelity(report()).model_dump_json())
    found = cells(load_task_success([tmp_path])[0])
    measured, seeded = _run(), _run(checkpoint=None)
    runs = [Run(QUICKSTART, measured, "measured"), Run(QUICKSTART.with_name("x.json"), seeded, "seeded")]
    rows = {row["id"]: row for row in run_rows(runs, 10.0, found)}
    assert rows["measured"]["task_success"] == 0.0 and rows["measured"]["task_success_below_reference"] is True
    assert "task_success" not in rows["seeded"]
