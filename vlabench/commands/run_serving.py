"""``run --robots N``: after the timed pass, the same prepared policy serves N robots through a dynamic batcher at
its workload's batch (``--batch``, the maximum batch); each robot sends raw observations (camera frames, the
instruction, its state) and receives its chunk in robot units."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from vlabench.analysis.cet import ExecutionModel
from vlabench.measure.serving import RobotsSettings, serve_robots
from vlabench.measure.timing import Contender, plain_inference
from vlabench.models.input_pipeline import InputPipeline, RawObservation, raw_observation, stack_rows
from vlabench.results.assemble import PlannedRun, execution_model
from vlabench.results.serving import ServingResult, serving_result
from vlabench.vocab import Precision

OBSERVATIONS_PER_ROBOT = 4
ROBOT_SEED_STRIDE = 7919


def request_period_s(control_hz: float, execution: ExecutionModel) -> float:
    """A robot asks again when the actions of its previous reply are executed: one step, or a chunk's actions."""
    return execution.actions_per_inference / control_hz


def robot_observations(plan: PlannedRun, robots: int) -> list[list[RawObservation]]:
    """Each robot's own seeded raw observations (one row each), cycled through its requests."""
    single = plan.workload.model_copy(update={"batch": 1})
    seed = plan.config.seed
    return [
        [raw_observation(single, seed + ROBOT_SEED_STRIDE * (robot + 1) + k) for k in range(OBSERVATIONS_PER_ROBOT)]
        for robot in range(robots)
    ]


def batched_inference(plan: PlannedRun, contender: Contender) -> Callable[[list[RawObservation]], list[Tensor]]:
    """Rows → one padded batch → preprocess, infer, postprocess → each row's chunk (on the host)."""
    target = plan.device.torch_device
    pipeline = InputPipeline(plan.spec, plan.workload, plan.config.seed, Precision.dtype(plan.precision), target)
    noise = contender.inputs[0][1]
    batch = plan.workload.batch

    def infer(rows: list[RawObservation]) -> list[Tensor]:
        observation = pipeline.preprocess(stack_rows(rows, batch))
        actions = pipeline.postprocess(plain_inference(contender.policy, contender.sampler, observation, noise))
        contender.policy.synchronize()
        return list(actions[: len(rows)].cpu().unbind(0))

    return infer


def serve_in_process(plan: PlannedRun, contender: Contender) -> ServingResult:
    """Serve ``--robots`` robots from ``contender`` for ``--serve-duration`` seconds."""
    config = plan.config
    execution = execution_model(config, plan.workload)
    robots = config.robots or 1
    settings = RobotsSettings(
        robots=robots,
        max_batch=plan.workload.batch,
        max_wait_s=config.max_wait_ms / 1000.0,
        period_s=request_period_s(config.control_hz, execution),
        duration_s=config.serve_duration_s,
        execution=config.execution,
    )
    observations = robot_observations(plan, robots)
    measured = serve_robots(
        batched_inference(plan, contender),
        lambda robot, number: observations[robot][number % OBSERVATIONS_PER_ROBOT],
        settings,
    )
    return serving_result(
        measured.requests,
        transport="in-process",
        execution=config.execution,
        robots=robots,
        max_batch=settings.max_batch,
        max_wait_s=settings.max_wait_s,
        period_s=settings.period_s,
        duration_s=measured.duration_s,
        actions_per_request=execution.actions_per_inference,
        failures=measured.failures,
    )
