"""``run --robots N``: after the timed pass, the same prepared policy serves N robots through a dynamic batcher at
its workload's batch (``--batch``, the maximum batch); each robot sends raw observations (camera frames, the
instruction, its state) and receives its chunk in robot units. ``--robots auto`` searches the most robots whose every
p99 passes the control gate. The energy meter is read over each serving window. The robots' memory and threads are
planned before any timing (``checks.check_robots_fit``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from vlabench.analysis.cet import CostReport, ExecutionModel
from vlabench.analysis.memory import check_fits_together
from vlabench.commands.run.checks import OBSERVATIONS_PER_ROBOT
from vlabench.commands.run.plan import RunPlan
from vlabench.config import RunConfig
from vlabench.errors import InsufficientMemoryError
from vlabench.measure.capacity import search_capacity
from vlabench.measure.serving import RobotsSettings, serve_robots
from vlabench.measure.timing import Contender, plain_inference
from vlabench.models.input_pipeline import (
    InputPipeline,
    RawObservation,
    raw_observation,
    stack_rows,
)
from vlabench.models.workload import Workload
from vlabench.results.assemble import device_price, execution_model, run_cost
from vlabench.results.capacity import CapacitySearch, CapacityStep
from vlabench.results.schema import EnergyResult
from vlabench.results.serving import ServingResult, serving_result
from vlabench.results.serving_energy import capacity_step, with_energy
from vlabench.telemetry.energy.base import EnergyMeter
from vlabench.vocab import Precision

WARMUP_PER_SIZE = 2
"""Inferences per prepared batch size before serving (a compiled graph's first calls are slower)."""
ROBOT_SEED_STRIDE = 7919


def request_period_s(control_hz: float, execution: ExecutionModel) -> float:
    """A robot asks again when the actions of its previous reply are executed: one step, or a chunk's actions."""
    return execution.actions_per_inference / control_hz


def camera_scene(frames: Tensor, seed: int) -> Tensor:
    """Camera-like frames in place of ``frames``' uniform noise (same shape): a lit gradient, a few flat objects and
    sensor noise (σ = 4 levels), so that a robot's JPEG or PNG is the size a camera's would be (uniform noise is the
    encoders' worst case, several times larger); what an inference costs does not depend on pixel values."""
    generator = torch.Generator().manual_seed(seed)
    *lead, height, width, _ = frames.shape
    rows = torch.linspace(0.0, 1.0, height).view(height, 1, 1)
    cols = torch.linspace(0.0, 1.0, width).view(1, width, 1)
    scenes = []
    for _ in range(math.prod(lead)):
        low, high = torch.rand(3, generator=generator) * 120, torch.rand(3, generator=generator) * 120 + 100
        image = low + (high - low) * (0.6 * rows + 0.4 * cols)
        for _ in range(4):
            top, left = (int(torch.randint(0, size // 2, (1,), generator=generator)) for size in (height, width))
            image[top : top + height // 4, left : left + width // 5] = torch.rand(3, generator=generator) * 255
        scenes.append(image + torch.randn(height, width, 3, generator=generator) * 4.0)
    return torch.stack(scenes).clamp(0, 255).to(torch.uint8).view(frames.shape)


class RobotObservations:
    """Each robot's own seeded raw observations (one row each of ``workload``, camera-like frames), made before a
    window for the robots it serves, then cycled through their requests."""

    def __init__(self, workload: Workload, seed: int) -> None:
        self.single, self.seed = workload.model_copy(update={"batch": 1}), seed
        self.rows: list[list[RawObservation]] = []

    def ensure(self, robots: int) -> RobotObservations:
        for robot in range(len(self.rows), robots):
            base = self.seed + ROBOT_SEED_STRIDE * (robot + 1)
            self.rows.append([self.observation(base + k) for k in range(OBSERVATIONS_PER_ROBOT)])
        return self

    def observation(self, seed: int) -> RawObservation:
        raw = raw_observation(self.single, seed)
        return replace(raw, frames=camera_scene(raw.frames, seed))

    def __call__(self, robot: int, number: int) -> RawObservation:
        return self.rows[robot][number % OBSERVATIONS_PER_ROBOT]


def bucket_sizes(max_batch: int) -> list[int]:
    """The batch sizes prepared for serving: powers of two below the maximum, and the maximum (a batch runs on the
    smallest that holds it, padded to it)."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch]


def sized_plans(plan: RunPlan) -> list[RunPlan]:
    """One plan per bucket size (each with its own footprint) when all of them fit in memory together; else the
    maximum batch alone (every batch padded to it)."""
    plans = [plan.at(batch=size) for size in bucket_sizes(plan.workload.batch)]
    try:
        check_fits_together(plan.spec, [p.footprint for p in plans], plan.device.torch_device, plan.precision)
    except InsufficientMemoryError:
        return [plan]
    return plans


class BatchedInference:
    """The prepared policy of each bucket size: rows → the smallest bucket that holds them (padded) → preprocess,
    infer, postprocess → each row's chunk on the host, and the rows computed."""

    def __init__(self, plans: list[RunPlan], contenders: list[Contender]) -> None:
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
        actions = pipeline.postprocess(plain_inference(contender.policy, contender.loop, observation, noise))
        contender.policy.synchronize()
        return list(actions[: len(rows)].cpu().unbind(0)), size


def batched_inference(plan: RunPlan, contender: Contender, prepare: Callable[[RunPlan], Contender]) -> BatchedInference:
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


def robots_settings(config: RunConfig, robots: int, max_batch: int, execution: ExecutionModel) -> RobotsSettings:
    return RobotsSettings(
        robots=robots,
        max_batch=max_batch,
        max_wait_s=config.max_wait_ms / 1000.0,
        period_s=request_period_s(config.control_hz, execution),
        duration_s=config.serve_duration_s,
        execution=config.execution,
        arrivals=config.arrivals,
        seed=config.seed,
    )


class InProcessServing:
    """The prepared policy (and one per smaller bucket size, from ``prepare``) behind a batcher, serving any number
    of robots one window at a time; ``meter`` is read over each window, with ``energy`` (the energy pass) for idle
    power."""

    def __init__(
        self,
        plan: RunPlan,
        contender: Contender,
        prepare: Callable[[RunPlan], Contender],
        meter: EnergyMeter | None = None,
        energy: EnergyResult | None = None,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self.plan, self.meter, self.energy, self.announce = plan, meter, energy, announce
        self.execution = execution_model(plan.config, plan.workload)
        self.observations = RobotObservations(plan.workload, plan.config.seed)
        self.infer = batched_inference(plan, contender, prepare)

    def serve(self, robots: int, config: RunConfig | None = None) -> ServingResult:
        """One window of ``robots`` under ``config``'s serving settings (default: the plan's)."""
        settings = robots_settings(config or self.plan.config, robots, self.plan.workload.batch, self.execution)
        payloads = self.observations.ensure(robots)
        announce_window(self.announce, settings, "in this process")
        meter, readings = self.meter if self.energy is not None else None, []

        def window(opening: bool) -> None:
            if opening:
                meter.start()
            else:
                readings.append(meter.stop())

        measured = serve_robots(self.infer, payloads, settings, window if meter else None)
        served = serving_result(
            measured,
            transport="in-process",
            actions_per_request=self.execution.actions_per_inference,
            batch_sizes=self.infer.sizes,
        )
        if not readings:
            return served
        return with_energy(
            served,
            label=meter.label,
            method=f"{meter.method}: the meter's average power over the serving window x its duration",
            joules=readings[0].average_w * served.duration_s,
            idle_w=self.energy.idle_w,
        )

    def costed(self, served: ServingResult) -> tuple[ServingResult, CostReport | None]:
        plan, energy = self.plan, self.energy
        return served, run_cost(plan, energy, served.latency, device_price(plan), served) if energy else None

    def close(self) -> None:
        if self.meter is not None:
            self.meter.close()


def serve_in_process(
    plan: RunPlan,
    contender: Contender,
    prepare: Callable[[RunPlan], Contender],
    meter: EnergyMeter | None = None,
    energy: EnergyResult | None = None,
    announce: Callable[[str], None] | None = None,
) -> tuple[ServingResult | None, str | None]:
    """Serve ``--robots`` robots (or search the capacity) for ``--serve-duration`` seconds each (``InProcessServing``).
    Returns the serving block (None: not served) and, when nothing was served (Ctrl-C or SIGTERM first, every robot
    failed), why there is none."""
    config = plan.config
    if not config.robots:
        return None, None
    try:
        serving = InProcessServing(plan, contender, prepare, meter, energy, announce)
    except KeyboardInterrupt:
        return None, "interrupted (Ctrl-C) while preparing to serve, after the timed pass"
    try:
        if config.robots != "auto":
            return serving.serve(config.robots or 1), None
        record, served = search(config, serving.serve, serving.costed, serving.execution)
        return served, None if served is not None else f"capacity search: {record.steps[0].reason}"
    except ValueError as exc:  # nothing was served in the window
        return None, str(exc)
    except KeyboardInterrupt:  # before any window opened
        return None, "interrupted (Ctrl-C) after the timed pass, before the robots were served"
    finally:
        serving.close()


def announce_window(announce: Callable[[str], None] | None, settings: RobotsSettings, where: str) -> None:
    if announce:
        announce(
            f"serving {settings.robots} robot(s) {where} for {settings.duration_s:g} s (Ctrl-C stops; what was "
            "served is kept)"
        )


def interrupted(served: ServingResult) -> bool:
    return served.stopped is not None and served.stopped.startswith("interrupted")


def search(
    config: RunConfig,
    serve_at: Callable[[int], ServingResult],
    costed: Callable[[ServingResult], tuple[ServingResult, CostReport | None]],
    execution: ExecutionModel,
    stop: Callable[[ServingResult], bool] = lambda served: interrupted(served),
) -> tuple[CapacitySearch, ServingResult | None]:
    """The capacity search (``--max-robots`` at most): every count served and its figures (``costed``: the block
    with its energy, and its cost), and the serving block at the capacity (None: not even one robot was served); a
    window for which ``stop`` holds (Ctrl-C) ends it, partial. A window that served nothing fails its count."""
    steps = []

    def judged(robots: int) -> tuple[bool, ServingResult | None]:
        try:
            served, cost = costed(serve_at(robots))
        except ValueError as exc:  # nothing was served in the window
            steps.append(CapacityStep(robots=robots, passed=False, reason=str(exc), requests=0, mean_batch=0,
                                      latency_p50_ms=0, worst_p99_ms=0))  # fmt: skip
            return False, None
        steps.append(capacity_step(served, cost, config.control_hz, execution))
        return steps[-1].passed, served

    found = search_capacity(judged, config.max_robots, lambda served: served is not None and stop(served))
    record = CapacitySearch(
        arrivals=config.arrivals,
        control_hz=config.control_hz,
        most=config.max_robots,
        capacity_robots=found.capacity,
        steps=steps,
    )
    served = found.at_capacity.served
    if served is None:
        return record, None
    update = {"capacity": record, "capacity_robots": found.capacity}
    if found.stopped:
        last = found.steps[-1]
        why = (last.served.stopped if last.served else None) or "interrupted (Ctrl-C) between two windows"
        update |= {"status": "partial", "stopped": f"capacity search stopped at {last.robots} robots: {why}"}
    return record, served.model_copy(update=update)
