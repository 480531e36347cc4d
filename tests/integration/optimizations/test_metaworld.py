"""The trained Meta-World policy end to end: the committed checkpoint through the user's --checkpoint loader, the
benchmark's scenes, demonstrations and a reproducible training step, a closed loop in which a deliberately broken
policy falls below the reference and is marked, and ``vlabench fidelity``'s smoke on two tasks."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.support.paths import ROOT
from vlabench.cli import app
from vlabench.commands.run import plan_run
from vlabench.commands.task_success import REFERENCE, TaskSuccessRequest, parse_variants, prepare, run_task_success
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.models.checkpoints import load_checkpoint
from vlabench.models.lerobot_folder import trained_checkpoint
from vlabench.models.replicas import FlowMatchingVLA
from vlabench.models.specs import load_model_spec
from vlabench.optimizations.closed_loop.metaworld import DEFAULT_TASKS, MetaWorldTask, TaskSet
from vlabench.optimizations.closed_loop.metaworld_demos import collect
from vlabench.optimizations.closed_loop.metaworld_eval import EpisodePlan, expert_episodes, random_episodes
from vlabench.optimizations.closed_loop.metaworld_training import TrainingConfig, train
from vlabench.results.artifacts import load_artifact
from vlabench.results.task_success_rows import cells, success_fields

pytest.importorskip("metaworld")

MODEL = "smolvla-metaworld-tiny"
SMOKE_TASKS = ("reach-v3", "coffee-button-v3")
MAX_BYTES = 25 * 1024 * 1024


@pytest.fixture(scope="module")
def folder():
    return trained_checkpoint(load_model_spec(MODEL))


def test_the_committed_checkpoint_loads_through_the_users_checkpoint_path(folder):
    record = json.loads((folder / "training.json").read_text())
    weights = folder / "model.safetensors"
    assert weights.stat().st_size <= MAX_BYTES
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == record["checkpoint"]["sha256"]
    for key in ("data_sha256", "loss_curve", "wall_s", "cpu", "load_average_before", "train_steps"):
        assert key in record or key in record["config"], key
    default, explicit = plan_run(RunConfig(model=MODEL)), plan_run(RunConfig(model=MODEL, checkpoint=folder))
    assert default.spec.checkpoint == explicit.spec.checkpoint is not None  # the trained weights by default
    model = FlowMatchingVLA(explicit.spec)
    report = load_checkpoint(model, folder)
    assert report.loaded == len(model.state_dict()) and not report.unexpected


def test_the_scenes_are_the_benchmarks_and_neither_trivial_nor_unsolved():
    plan = EpisodePlan(DEFAULT_TASKS, episodes=1, seed=0, actions_per_chunk=5, max_steps=150)
    expert, floor = expert_episodes(plan), random_episodes(plan)
    assert all(all(outcomes) for outcomes in expert.success.values())  # the ceiling solves every scene
    assert not any(any(outcomes) for outcomes in floor.success.values())  # random motion solves none
    task = MetaWorldTask("reach-v3", "corner3", 64, 0, 10)
    try:
        first, again = task.reset(3), task.reset(3)
        assert np.array_equal(first, again) and not np.array_equal(first, task.reset(4))
        frame = task.frame()
        assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8 and frame.std() > 0
    finally:
        task.close()


def test_an_unknown_task_or_camera_lists_the_valid_ones():
    with pytest.raises(InputError, match="reach-v3"):
        MetaWorldTask("reach-v9", "corner3", 64, 0, 10)
    with pytest.raises(InputError, match="corner2"):
        MetaWorldTask("reach-v3", "kitchen", 64, 0, 10)
    with pytest.raises(InputError, match="trained on"):
        DEFAULT_TASKS.choose(["pick-place-v3"])


def test_demonstrations_label_each_sample_with_the_next_clean_actions_and_training_repeats():
    one = TaskSet({"reach-v3": DEFAULT_TASKS.instructions["reach-v3"]}, "corner3", 64)
    demos = collect(one, episodes=1, seed=0, chunk=10, action_noise=0.0, frame_every=1, max_steps=150)
    assert demos.frames.shape == (len(demos), 64, 64, 3) and demos.actions.shape == (len(demos), 10, 4)
    np.testing.assert_array_equal(demos.actions[1:, :-1], demos.actions[:-1, 1:])  # a chunk shifted by a step
    assert demos.digest() == collect(one, 1, 0, 10, 0.0, 1, 150).digest()
    config = TrainingConfig(episodes=1, train_steps=3, batch_size=4, loss_every=1, warmup_steps=1)
    first, second = train(config, one), train(config, one)
    assert first.record.loss_curve == second.record.loss_curve and len(first.record.loss_curve) == 3
    weights = zip(first.model.state_dict().values(), second.model.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in weights)


class NegatedVelocity:
    """The reference policy with its expert's velocity negated: an optimization that breaks the policy."""

    def __init__(self, policy) -> None:
        self.policy = policy

    def prefix_lane(self):
        return self.policy.prefix_lane()

    def denoise_step(self, x_t, t, cache):
        return -self.policy.denoise_step(x_t, t, cache)

    def synchronize(self) -> None:
        self.policy.synchronize()


def test_a_broken_policy_falls_below_the_reference_and_its_row_is_marked(folder):
    broken = prepare(parse_variants(REFERENCE)[0], MODEL, folder, "auto", seed=0)
    broken.variant.name, broken.variant.policy = "broken", NegatedVelocity(broken.variant.policy)
    request = TaskSuccessRequest(MODEL, tuple(parse_variants(REFERENCE)), tasks=SMOKE_TASKS, episodes=4, max_steps=60)
    report, skipped = run_task_success(request, extra=[(broken.variant, {**broken.fields, "precision": "int8"})])
    reference, row = report.row(REFERENCE), report.row("broken")
    assert not skipped and reference.success_rate >= 0.75
    assert row.interval[1] < reference.interval[0] and row.below_reference
    assert row.difference_interval[1] < 0
    assert row.cycle_ms is not None and row.speedup is not None
    fidelity = replace_fidelity(report)
    run = plan_run(RunConfig(model=MODEL, precision="int8", energy_meter="none"))
    fields = success_fields(_run_result(run), cells([fidelity]))
    assert fields["task_success_below_reference"] is True and fields["task_success"] == row.success_rate


class InterruptAfter(NegatedVelocity):
    """The reference policy, until a Ctrl-C arrives in the middle of its second episode."""

    def __init__(self, policy, calls: int) -> None:
        super().__init__(policy)
        self.calls = calls

    def denoise_step(self, x_t, t, cache):
        self.calls -= 1
        if self.calls < 0:
            raise KeyboardInterrupt
        return self.policy.denoise_step(x_t, t, cache)


def test_an_interrupt_keeps_the_episodes_every_variant_completed(folder):
    late = prepare(parse_variants(REFERENCE)[0], MODEL, folder, "auto", seed=0)
    calls = 20 + 2 * 40 + 15  # its warm-up, a first round of two tasks (at most 4 cycles of 10 steps each), then stop
    late.variant.name, late.variant.policy = "late", InterruptAfter(late.variant.policy, calls)
    request = TaskSuccessRequest(MODEL, tuple(parse_variants(REFERENCE)), tasks=SMOKE_TASKS, episodes=3, max_steps=20)
    report, _ = run_task_success(request, extra=[(late.variant, late.fields)])
    assert report.interrupted and list(report.tasks) == list(SMOKE_TASKS)
    played = {row.episodes for row in [report.expert, report.random, *report.variants]}
    assert len(played) == 1 and 2 <= played.pop() < 6  # the same rounds for every row, not all three


def replace_fidelity(success):
    from datetime import datetime, timezone

    from vlabench.hardware.detection import detect_host
    from vlabench.results.fidelity_artifact import FidelityReport
    from vlabench.results.provenance import collect_provenance

    now = datetime.now(timezone.utc)
    return FidelityReport(
        started_utc=now,
        finished_utc=now,
        model=MODEL,
        provenance=collect_provenance(detect_host(), 1),
        seed=0,
        open_loop=[],
        closed_loop=[],
        task_success=success,
    )


def _run_result(plan):
    """The identity a run result of ``plan`` records (model, device, weights, backend, precision, steps)."""

    from vlabench.results.schema import load_result

    quick = load_result(ROOT / "benchmarks/results/quickstart/smolvla-cpu.json")
    return quick.model_copy(
        update={
            "model": quick.model.model_copy(update={"name": MODEL, "checkpoint": plan.spec.checkpoint}),
            "device": quick.device.model_copy(update={"profile": plan.device.profile.name}),
            "backend": plan.backend.name,
            "precision": plan.precision,
            "workload": quick.workload.model_copy(update={"steps": plan.workload.steps}),
        }
    )


def test_vlabench_fidelity_plays_two_tasks_in_the_integration_smoke(tmp_path):
    args = [
        "fidelity",
        "-m",
        MODEL,
        "--tasks",
        ",".join(SMOKE_TASKS),
        "--episodes",
        "2",
        "--max-steps",
        "60",
        "--variants",
        "dp-cache",
        "--observations",
        "2",
        "--out",
        str(tmp_path),
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    written = load_artifact(next(tmp_path.glob("*.fidelity.json")))
    success = written.task_success
    assert [row.variant for row in success.variants] == [REFERENCE, "dp-cache"]
    assert list(success.tasks) == list(SMOKE_TASKS) and all(row.episodes == 4 for row in success.variants)
    assert success.row("dp-cache").dp_cache.computed == (0, 1, 2, 6, 8, 9) and success.row("dp-cache").steps == 10
    assert json.loads(result.stdout)["task_success"]["reference"] == REFERENCE


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tasks", "pick-place-v3"], "trained on"),
        (["--variants", "dp-cache,warp-speed"], "closed-loop variant"),
        (["--actions-per-chunk", "11"], "1..10"),
    ],
)
def test_bad_closed_loop_requests_are_clear_errors(tmp_path, flags, message):
    result = CliRunner().invoke(app, ["fidelity", "-m", MODEL, "--observations", "1", "--out", str(tmp_path), *flags])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not list(tmp_path.glob("*.json"))


def test_a_request_without_episodes_or_with_a_foreign_folder_is_refused(folder, tmp_path):
    reference_only = tuple(parse_variants(REFERENCE))
    with pytest.raises(InputError, match=r"training\.json"):
        run_task_success(TaskSuccessRequest(MODEL, reference_only, checkpoint=tmp_path))
    with pytest.raises(InputError, match="--episodes"):
        run_task_success(TaskSuccessRequest(MODEL, reference_only, checkpoint=folder, episodes=0))
