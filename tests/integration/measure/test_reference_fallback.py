"""The correctness reference falls back from fp32 to the most precise torch build that fits (planned, printed and
recorded), a run is refused with every candidate's need when none fits, and token models record token agreement."""

import pytest
import torch

from vlabench.analysis.memory import estimate_footprint
from vlabench.cli.views.run import correctness_line, plan_summary
from vlabench.commands.run import execute, execution, plan_run
from vlabench.config import RunConfig
from vlabench.errors import InsufficientMemoryError
from vlabench.measure.correctness import TOLERANCES, Correctness, action_tokens, compare, gate_tolerance
from vlabench.measure.correctness import reference_actions as real_reference_actions
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.results.schema import load_result, write_result

pytest.importorskip("torchao")

MODEL = "openvla-7b-tiny"
CPU = torch.device("cpu")


def needs(config: RunConfig) -> dict[str, int]:
    """Each precision's torch footprint for ``config``'s run, from the planner's own estimator."""
    spec = load_model_spec(config.model)
    workload = Workload.from_spec(spec)
    return {
        p: estimate_footprint(spec, workload, p, "torch", config.max_iterations).total_bytes
        for p in ("fp32", "bf16", "int8", "int4")
    }


def limit_memory(monkeypatch, available: int) -> None:
    monkeypatch.setattr("vlabench.analysis.memory.available_bytes", lambda device: available)


def test_fp32_reference_is_kept_when_it_fits(fast_run):
    plan = plan_run(fast_run.config(model=MODEL, precision="int8", preprocess=False))
    assert plan.reference.precision == "fp32" and plan.reference.reason == ""
    assert "reference  torch eager fp32" in plan_summary([plan]).plain


def test_bf16_reference_when_fp32_does_not_fit(fast_run, monkeypatch, tmp_path):
    config = fast_run.config(model=MODEL, precision="int4", out=tmp_path, preprocess=False)
    need = needs(config)
    assert max(need["bf16"], need["int4"]) < need["fp32"]
    limit_memory(monkeypatch, (max(need["bf16"], need["int4"]) + need["fp32"]) // 2)
    plan = plan_run(config)
    assert plan.reference.precision == "bf16"
    assert "fp32 needs about" in plan.reference.reason
    assert "reference  torch eager bf16, not fp32: fp32 needs about" in plan_summary([plan]).plain

    events = []

    def spy_reference(*args, **kwargs):
        events.append(("reference", args[7]))  # precision, positional after the schedule
        return real_reference_actions(*args, **kwargs)

    real_prepare = execution.prepare_contender
    monkeypatch.setattr(execution, "reference_actions", spy_reference)
    monkeypatch.setattr(
        execution, "prepare_contender", lambda *a: events.append(("measured", None)) or real_prepare(*a)
    )
    result = execute(plan)
    assert events == [("reference", "bf16"), ("measured", None)]  # freed before the measured model is built
    check = result.correctness
    assert check.reference_precision == "bf16" and "relative to this reference" in check.reference
    assert check.tolerance == gate_tolerance("int4", "bf16") == TOLERANCES["int4"]
    assert check.tokens_compared == 7 and 0.0 <= check.token_agreement <= 1.0
    assert "vs torch bf16" in correctness_line(result).plain
    loaded = load_result(write_result(result, tmp_path))
    assert loaded.correctness.reference_precision == "bf16"
    assert loaded.correctness.token_agreement == check.token_agreement


def test_refused_naming_each_precision_when_no_reference_fits(fast_run, monkeypatch):
    config = fast_run.config(model=MODEL, precision="int4", preprocess=False)
    need = needs(config)
    smallest_reference = min(need["fp32"], need["bf16"], need["int8"])
    assert need["int4"] < smallest_reference
    limit_memory(monkeypatch, (need["int4"] + smallest_reference) // 2)
    with pytest.raises(InsufficientMemoryError, match=r"no correctness reference fits.*fp32 .* GiB, bf16 .*, int8 "):
        plan_run(config)


def test_token_agreement_recorded_at_int8(fast_run):
    result = execute(plan_run(fast_run.config(model=MODEL, precision="int8", preprocess=False)))
    check = result.correctness
    assert check.reference_precision == "fp32" and check.tokens_compared == 7
    assert 0.0 <= check.token_agreement <= 1.0
    assert "action tokens equal to the reference's" in correctness_line(result).plain


def test_token_agreement_against_itself_and_one_changed_token():
    spec = load_model_spec(MODEL)
    workload = Workload.from_spec(spec)
    obs = synthetic_observation(spec, workload, 0, torch.float32, CPU)
    noise = initial_noise(workload, 0, torch.float32, CPU)
    reference = real_reference_actions(spec, workload, 0, obs, noise, CPU)
    same = compare(reference, reference, noise, "fp32", spec=spec)
    assert same.token_agreement == 1.0 and same.tokens_compared == 7
    shifted = reference.clone()
    step = 2 / (spec.action.bins - 1)
    shifted[0, 0, 0] += step if shifted[0, 0, 0] < 0 else -step
    assert compare(shifted, reference, noise, "fp32", spec=spec).token_agreement == pytest.approx(6 / 7)


def test_tokens_survive_bf16_outputs():
    spec = load_model_spec("openvla-7b")
    bins = torch.arange(spec.action.bins)
    values = torch.linspace(-1, 1, spec.action.bins).bfloat16()
    assert torch.equal(action_tokens(values, spec), bins)


def test_gate_tolerance_is_the_looser_of_measured_and_reference():
    assert gate_tolerance("fp16") is TOLERANCES["fp16"]
    looser = gate_tolerance("fp16", "bf16")
    assert looser.max_relative_error == TOLERANCES["bf16"].max_relative_error
    assert looser.min_cosine == TOLERANCES["bf16"].min_cosine


def test_results_without_the_new_fields_still_load():
    old = {
        "max_abs_error": 0.1,
        "cosine": 0.99,
        "relative_error": 0.01,
        "displacement_cosine": 0.999,
        "tolerance": {"max_relative_error": 0.25, "min_cosine": 0.99},
        "passed": True,
    }
    check = Correctness.model_validate(old)
    assert check.reference_precision == "fp32" and check.token_agreement is None and check.tokens_compared is None
