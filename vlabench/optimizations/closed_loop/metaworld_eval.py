"""Closed-loop Meta-World episodes of a trained VLA under several ways of running it, interleaved episode by episode.

A variant is a prepared policy (any backend at any precision, with or without fused expert K/V), its action loop
(the Euler loop at the variant's step count, with its DP-Cache schedule) and its V-AEFusion stale steps: exactly what
``vlabench run`` / ``vlabench loop`` execute. Each control cycle renders one frame, runs the policy's input pipeline
(the frame, the instruction and the state, normalized with the checkpoint's statistics), one ``FusionLoop`` cycle and
the unnormalization, then executes the first ``actions_per_chunk`` actions of the chunk open loop. The initial noise
of a cycle is seeded from (seed, task, episode, cycle), and episode e of a task plays the same scene for every
variant, so variants differ only by how the policy is run. Episodes are interleaved (episode e of every variant,
then e + 1), so a drift in the host's speed falls on every variant alike; the policy's time per cycle (input
pipeline, prefix and action loop, unnormalization) is recorded for each cycle, the environment's time is not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from time import perf_counter_ns
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vlabench.measure.action_loops import ActionLoop
from vlabench.models.input_pipeline import InputPipeline, RawObservation
from vlabench.optimizations.closed_loop.metaworld import (
    ACTION_DIM,
    EVALUATION_SEED,
    MetaWorldTask,
    TaskSet,
    scripted_expert,
)
from vlabench.optimizations.fusion import FusionLoop

CPU = torch.device("cpu")
WARMUP_CYCLES = 2  # untimed cycles per variant before the first episode (compilation, allocator, caches)
EXPERT, RANDOM = "scripted expert", "random actions"


@dataclass
class PolicyVariant:
    """One way of running the policy: its prepared policy (``PreparedPolicy``-like), its action loop and V-AEFusion."""

    name: str
    policy: Any  # prefix_lane(), denoise_step(), synchronize()
    loop: Callable[[], ActionLoop]
    stale_steps: int = 0
    dtype: torch.dtype = torch.float32  # what the policy's inputs are cast to
    concurrent: bool = True  # V-AEFusion overlaps the prefix with the stale steps on a worker thread


@dataclass
class VariantEpisodes:
    """What one variant did: per task, each episode's success, steps and the policy's time of each of its cycles."""

    name: str
    success: dict[str, list[bool]] = field(default_factory=dict)
    steps: dict[str, list[int]] = field(default_factory=dict)
    cycle_times: dict[str, list[list[float]]] = field(default_factory=dict)

    def add(self, task: str, success: bool, steps: int, cycle_ms: list[float] | None = None) -> None:
        self.success.setdefault(task, []).append(success)
        self.steps.setdefault(task, []).append(steps)
        self.cycle_times.setdefault(task, []).append(cycle_ms or [])

    @property
    def cycle_ms(self) -> list[float]:
        """Every cycle's policy time, in milliseconds."""
        return [ms for episodes in self.cycle_times.values() for times in episodes for ms in times]

    def first(self, episodes: dict[str, int]) -> VariantEpisodes:
        """Only the first ``episodes[task]`` episodes of each task named (tasks with none are dropped)."""
        kept = VariantEpisodes(self.name)
        for task, keep in episodes.items():
            if keep:
                kept.success[task], kept.steps[task] = self.success[task][:keep], self.steps[task][:keep]
                kept.cycle_times[task] = self.cycle_times[task][:keep]
        return kept


@dataclass(frozen=True)
class EpisodePlan:
    """The episodes every variant plays."""

    task_set: TaskSet
    episodes: int  # per task
    seed: int
    actions_per_chunk: int
    max_steps: int
    benchmark_seed: int = EVALUATION_SEED


def cycle_noise(seed: int, task: int, episode: int, cycle: int, shape: tuple[int, ...]) -> Tensor:
    """The initial noise of one control cycle, the same for every variant."""
    entropy = int(np.random.SeedSequence([seed, task, episode, cycle]).generate_state(1, np.uint64)[0])
    return torch.randn(shape, generator=torch.Generator().manual_seed(entropy))


def _observation(pipeline: InputPipeline, frame: np.ndarray, instruction: str, state: np.ndarray, dtype) -> Any:
    raw = RawObservation(
        frames=torch.from_numpy(np.ascontiguousarray(frame))[None, None],
        instruction=[instruction],
        state=torch.from_numpy(state)[None],
    )
    obs = pipeline.preprocess(raw)
    return obs if dtype == torch.float32 else replace(obs, images=obs.images.to(dtype), state=obs.state.to(dtype))


def _episode(
    variant: PolicyVariant,
    env: MetaWorldTask,
    pipeline: InputPipeline,
    plan: EpisodePlan,
    task: int,
    episode: int,
) -> tuple[bool, int, list[float]]:
    instruction = list(plan.task_set.instructions.values())[task]
    workload = pipeline.workload
    shape = (1, workload.chunk, workload.action_dim)
    policy = variant.policy
    loop = FusionLoop(
        policy.prefix_lane(), policy, variant.loop(), policy.synchronize, variant.stale_steps, CPU, variant.concurrent
    )
    state, success, done, times = env.reset(episode), False, False, []
    try:
        while not done:
            frame = env.frame()
            noise = cycle_noise(plan.seed, task, episode, len(times), shape).to(variant.dtype)
            start = perf_counter_ns()
            obs = _observation(pipeline, frame, instruction, state, variant.dtype)
            chunk, _ = loop.cycle(obs, noise)
            actions = pipeline.postprocess(chunk)[0].clamp(-1.0, 1.0).numpy()
            times.append((perf_counter_ns() - start) / 1e6)
            for action in actions[: plan.actions_per_chunk]:
                state, success, done = env.step(action)
                if done:
                    break
    finally:
        loop.close()
    return success, env.steps, times


def _warm_up(variant: PolicyVariant, env: MetaWorldTask, pipeline: InputPipeline, plan: EpisodePlan) -> None:
    instruction = next(iter(plan.task_set.instructions.values()))
    state = env.reset(0)
    shape = (1, pipeline.workload.chunk, pipeline.workload.action_dim)
    loop = FusionLoop(
        variant.policy.prefix_lane(),
        variant.policy,
        variant.loop(),
        variant.policy.synchronize,
        variant.stale_steps,
        CPU,
        variant.concurrent,
    )
    try:
        for cycle in range(WARMUP_CYCLES):
            loop.cycle(
                _observation(pipeline, env.frame(), instruction, state, variant.dtype),
                cycle_noise(plan.seed, 0, 0, cycle, shape).to(variant.dtype),
            )
    finally:
        loop.close()


def baseline_episodes(
    plan: EpisodePlan, name: str, controller: Callable[[str, int], Callable], episodes: dict[str, int] | None = None
) -> VariantEpisodes:
    """A policy-free controller on the same scenes, one action per step and no camera: ``controller(task,
    episode)`` returns the episode's observation → action function. ``episodes``: per task (default: the plan's)."""
    record = VariantEpisodes(name)
    counts = episodes if episodes is not None else dict.fromkeys(plan.task_set.tasks, plan.episodes)
    for task, count in counts.items():
        env = MetaWorldTask(task, plan.task_set.camera, plan.task_set.image_size, plan.benchmark_seed, plan.max_steps)
        try:
            for episode in range(count):
                act = controller(task, episode)
                state, success, done = env.reset(episode), False, False
                while not done:
                    state, success, done = env.step(np.asarray(act(state), dtype=np.float32))
                record.add(task, success, env.steps)
        finally:
            env.close()
    return record


def expert_episodes(plan: EpisodePlan, episodes: dict[str, int] | None = None) -> VariantEpisodes:
    """Meta-World's scripted expert on the same scenes: the ceiling a cloned policy approaches."""
    experts: dict[str, Any] = {}

    def controller(task: str, episode: int) -> Callable:
        return experts.setdefault(task, scripted_expert(task)).get_action

    return baseline_episodes(plan, EXPERT, controller, episodes)


def random_episodes(plan: EpisodePlan, episodes: dict[str, int] | None = None) -> VariantEpisodes:
    """Uniform random actions on the same scenes (seeded per task and episode): the floor no task should reach."""
    tasks = plan.task_set.tasks

    def controller(task: str, episode: int) -> Callable:
        rng = np.random.default_rng([plan.seed, tasks.index(task), episode])
        return lambda state: rng.uniform(-1.0, 1.0, size=ACTION_DIM)

    return baseline_episodes(plan, RANDOM, controller, episodes)


def run_episodes(
    variants: list[PolicyVariant],
    pipeline: InputPipeline,
    plan: EpisodePlan,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[VariantEpisodes], bool]:
    """Every variant on the plan's episodes, interleaved (see the module docstring), round by round: episode e of
    every task, then e + 1, so a run stopped early has as many episodes of each task. One record per variant, and
    whether an interrupt (Ctrl-C) stopped it; then every record keeps the episodes all variants completed."""
    records = [VariantEpisodes(variant.name) for variant in variants]
    tasks = plan.task_set.tasks
    envs: list[MetaWorldTask] = []
    interrupted = False
    try:
        with torch.inference_mode():
            for task in tasks:
                envs.append(
                    MetaWorldTask(
                        task, plan.task_set.camera, plan.task_set.image_size, plan.benchmark_seed, plan.max_steps
                    )
                )
            for variant in variants:
                _warm_up(variant, envs[0], pipeline, plan)
            for episode in range(plan.episodes):
                for index, env in enumerate(envs):
                    for variant, record in zip(variants, records, strict=True):
                        record.add(env.task, *_episode(variant, env, pipeline, plan, index, episode))
                if progress:
                    done = ", ".join(f"{r.name} {sum(map(sum, r.success.values()))}" for r in records)
                    progress(f"episode {episode + 1}/{plan.episodes} of {len(tasks)} tasks: successes {done}")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for env in envs:
            env.close()
    if not interrupted:
        return records, False
    completed = {task: min(len(r.success.get(task, [])) for r in records) for task in tasks}
    return [record.first(completed) for record in records], True
