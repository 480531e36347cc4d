"""``run --robots N``: after the timed pass, the same prepared policy serves N robots through a dynamic batcher at
its workload's batch (``--batch``, the maximum batch); each robot sends raw observations (camera frames, the
instruction, its state) and receives its chunk in robot units."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from torch import Tensor

from vlabench.analysis.cet import ExecutionModel
from vlabench.analysis.memory import check_fits_together, estimate_footprint
from vlabench.errors import InsufficientMemoryError
from vlabench.measure.run_settings import iteration_cap
from vlabench.measure.serving import RobotsSettings, serve_robots
from vlabench.measure.timing import Contender, plain_inference
from vlabench.models.input_pipeline import InputPipeline, RawObservation, raw_observation, stack_rows
from vlabench.models.workload import Workload
from vlabench.results.assemble import PlannedRun, execution_model
from vlabench.results.serving import ServingResult, serving_result
from vlabench.vocab import Precision

OBSERVATIONS_PER_ROBOT = 4
WARMUP_PER_SIZE = 2
"""Inferences per prepared batch size before serving (a compiled graph's first calls are slower)."""
ROBOT_SEED_STRIDE = 7919


def request_period_s(control_hz: float, execution: ExecutionModel) -> float:
    """A robot asks again when the actions of its previous reply are executed: one step, or a chunk's actions."""
    return execution.actions_per_inference / control_hz


def robot_observations(workload: Workload, seed: int, robots: int) -> list[list[RawObservation]]:
    """Each robot's own seeded raw observations (one row each of ``workload``), cycled through its requests."""
    single = workload.model_copy(update={"batch": 1})
    return [
        [raw_observation(single, seed + ROBOT_SEED_STRIDE * (robot + 1) + k) for k in range(OBSERVATIONS_PER_ROBOT)]
        for robot in range(robots)
    ]


def bucket_sizes(max_batch: int) -> list[int]:
    """The batch sizes prepared for serving: powers of two below the maximum, and the maximum (a batch runs on the
    smallest that holds it, padded to it)."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch]


def sized_plans(plan: PlannedRun) -> list[PlannedRun]:
    """One plan per bucket size (each with its own footprint) when all of them fit in memory together; else the
    maximum batch alone (every batch padded to it)."""
    config = plan.config
    plans = []
    for size in bucket_sizes(plan.workload.batch):
        workload = plan.workload.model_copy(update={"batch": size})
        footprint = estimate_footprint(
            plan.spec, workload, plan.precision, plan.backend.name, iteration_cap(config), config.preprocess
        )
        sized = config.model_copy(update={"batch": size})
        plans.append(replace(plan, workload=workload, config=sized, footprint=footprint))
    try:
        check_fits_together(plan.spec, [p.footprint for p in plans], plan.device.torch_device, plan.precision)
    except InsufficientMemoryError:
        return [plan]
    return plans


class BatchedInference:
    """The prepared policy of each bucket size: rows → the smallest bucket that holds them (padded) → preprocess,
    infer, postprocess → each row's chunk on the host, and the rows computed."""

    def __init__(self, plans: list[PlannedRun], contenders: list[Contender]) -> None:
        largest = plans[-1]
        target, dtype = largest.device.torch_device, Precision.dtype(largest.precision)
        self.buckets = {
            plan.workload.batch: (
                contender,
                InputPipeline(plan.spec, plan.workload, plan.config.seed, dtype, target),
                contender.inputs[0][1],
            )
            for plan, contender in zip(plans, contenders, strict=True)
        }

    @property
    def sizes(self) -> list[int]:
        return sorted(self.buckets)

    def __call__(self, rows: list[RawObservation]) -> tuple[list[Tensor], int]:
        size = next(size for size in self.sizes if size >= len(rows))
        contender, pipeline, noise = self.buckets[size]
        observation = pipeline.preprocess(stack_rows(rows, size))
        actions = pipeline.postprocess(plain_inference(contender.policy, contender.sampler, observation, noise))
        contender.policy.synchronize()
        return list(actions[: len(rows)].cpu().unbind(0)), size


def batched_inference(
    plan: PlannedRun, contender: Contender, prepare: Callable[[PlannedRun], Contender]
) -> BatchedInference:
    """``contender`` (prepared at the plan's batch) and, memory permitting, one more prepared policy per smaller
    bucket size (``prepare``: exported graphs and compiled models come from the caches)."""
    plans = sized_plans(plan)
    contenders = [contender if p.workload.batch == plan.workload.batch else prepare(p) for p in plans]
    inference = BatchedInference(plans, contenders)
    example = raw_observation(plan.workload.model_copy(update={"batch": 1}), plan.config.seed)
    for size in inference.sizes:  # each size's first inferences through the serving path, before any robot waits
        for _ in range(WARMUP_PER_SIZE):
            inference([example] * size)
    return inference


def serve_in_process(
    plan: PlannedRun, contender: Contender, prepare: Callable[[PlannedRun], Contender]
) -> ServingResult:
    """Serve ``--robots`` robots from ``contender`` (and the smaller bucket sizes ``prepare`` makes) for
    ``--serve-duration`` seconds."""
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
    observations = robot_observations(plan.workload, config.seed, robots)
    infer = batched_inference(plan, contender, prepare)
    measured = serve_robots(
        infer,
        lambda robot, number: observations[robot][number % OBSERVATIONS_PER_ROBOT],
        settings,
    )
    return serving_result(
        measured,
        transport="in-process",
        actions_per_request=execution.actions_per_inference,
        batch_sizes=infer.sizes,
    )
