"""The launchers share one interface: the same runs give the same kind of outcome wherever they execute (this
process, a spawned child, a ``vlabench run`` subprocess; Ray's task is tested in test_ray_sweep)."""

from __future__ import annotations

import pytest

from vlabench.commands.run import ConfiguredRun, InProcess, SpawnedChild, Subprocess
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.results.launch_outcome import LaunchOutcome

LAUNCHERS = {
    "in-process": InProcess,
    "spawned-child": SpawnedChild,
    "subprocess": lambda: Subprocess(timeout_s=120),
}


@pytest.mark.parametrize("where", LAUNCHERS)
def test_an_unknown_model_fails_as_the_same_input_error_from_every_launcher(where):
    outcome = LAUNCHERS[where]().launch([ConfiguredRun(RunConfig(model="smolvla-tinyy"))])
    assert outcome.status == "failed" and outcome.error == "InputError" and outcome.result_texts == []
    assert "Did you mean 'smolvla-tiny'?" in outcome.reason
    with pytest.raises(InputError, match="smolvla-tinyy"):
        outcome.raise_error()


@pytest.mark.parametrize("where", LAUNCHERS)
def test_a_run_gives_one_valid_result_from_every_launcher(fast_run, where, tmp_path):
    config = fast_run.config(model="smolvla-tiny", out=tmp_path)
    outcome = LAUNCHERS[where]().launch([ConfiguredRun(config)])
    assert outcome.status == "ok" and outcome.error is None, outcome.reason
    (result,) = outcome.results()
    assert result.valid and result.model.name == "smolvla-tiny" and result.timing.phases["e2e"].p50 > 0
    assert outcome.wall_s > 0 and outcome.hostname and outcome.started_utc is not None
    # the outcome crosses a process boundary (a Ray node sends it as JSON) without losing the result
    assert LaunchOutcome.model_validate_json(outcome.model_dump_json()).results()[0].run_id == result.run_id


def test_a_subprocess_launch_takes_one_run():
    with pytest.raises(ValueError, match="one config, not 2"):
        Subprocess().launch([ConfiguredRun(RunConfig()), ConfiguredRun(RunConfig())])


def test_a_launcher_runs_the_worker_it_was_given():
    """The worker is the launcher's: what executes the planned runs is chosen by whoever builds the launcher."""
    seen = []

    def worker(plans, progress, announce, notes):
        seen.append(([plan.spec.name for plan in plans], notes))
        return []

    outcome = InProcess(notes=("a note",), worker=worker).launch([ConfiguredRun(RunConfig(model="smolvla-tiny"))])
    assert seen == [(["smolvla-tiny"], ("a note",))]
    assert outcome.status == "ok" and outcome.results() == []
