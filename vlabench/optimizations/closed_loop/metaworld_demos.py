"""Scripted Meta-World demonstrations for behaviour cloning: camera frames, the robot state, the task's instruction,
and the expert's next actions.

Episode e of a task plays scene e mod 50 of the MT1 benchmark built with seed ``DEMONSTRATION_SEEDS[e // 50]``, so
no demonstrated scene is an evaluated one. DART-style noise: an episode executes the scripted expert's action plus
Gaussian noise whose standard deviation is drawn once per episode from U(0, ``action_noise``), so the data visits
states off the expert's path; the label of every visited state is the clean expert's action there. An episode runs
until ``chunk`` steps after the task first succeeds (so the last labelled chunks are the expert's own), or
``max_steps``. Every ``frame_every``-th step is a sample: its frame, its state, and the clean actions of the next
``chunk`` visited states (the last one repeated past the episode's end).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vlabench.optimizations.closed_loop.metaworld import (
    ACTION_DIM,
    CONFIGURATIONS,
    DEMONSTRATION_SEEDS,
    STATE_DIM,
    MetaWorldTask,
    TaskSet,
    scripted_expert,
)


@dataclass(frozen=True)
class Demonstrations:
    """Samples of every task, in task order then episode order."""

    frames: np.ndarray  # (N, H, W, 3) uint8
    states: np.ndarray  # (N, STATE_DIM) float32
    tasks: np.ndarray  # (N,) int64: index into ``task_names``
    actions: np.ndarray  # (N, chunk, ACTION_DIM) float32, clean expert actions
    task_names: tuple[str, ...]
    episodes: int  # per task
    expert_successes: int  # demonstrated episodes in which the (noisy) expert succeeded

    def __len__(self) -> int:
        return len(self.states)

    def digest(self) -> str:
        """sha256 of every array and the task names: the identity of the training data."""
        digest = hashlib.sha256()
        for array in (self.frames, self.states, self.tasks, self.actions):
            digest.update(str((array.dtype, array.shape)).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update("\n".join(self.task_names).encode())
        return digest.hexdigest()


def _episode(
    env: MetaWorldTask, expert, episode: int, rng: np.random.Generator, action_noise: float, chunk: int, every: int
):
    """One demonstrated episode: (frames, states, clean action chunks) of its samples, and whether it succeeded."""
    observation = env.reset(episode)
    noise = rng.uniform(0.0, action_noise)
    frames, states, clean, sampled = [], [], [], []
    succeeded_at = None
    while True:
        step = len(clean)
        if step % every == 0:
            frames.append(env.frame())
            states.append(observation)
            sampled.append(step)
        action = np.asarray(expert.get_action(observation), dtype=np.float32)
        clean.append(action)
        executed = np.clip(action + noise * rng.standard_normal(ACTION_DIM), -1.0, 1.0)
        observation, success, _ = env.step(executed)
        if success and succeeded_at is None:
            succeeded_at = step
        if (succeeded_at is not None and step >= succeeded_at + chunk) or env.steps >= env.max_steps:
            break
    clean = np.asarray(clean, dtype=np.float32)
    padded = np.concatenate([clean, np.repeat(clean[-1:], chunk - 1, axis=0)])
    chunks = np.stack([padded[step : step + chunk] for step in sampled])
    return frames, states, chunks, succeeded_at is not None


def collect(
    task_set: TaskSet,
    episodes: int,
    seed: int,
    chunk: int,
    action_noise: float,
    frame_every: int,
    max_steps: int,
    progress: Callable[[str], None] | None = None,
) -> Demonstrations:
    """``episodes`` demonstrated episodes of every task in ``task_set`` (see the module docstring)."""
    if episodes > CONFIGURATIONS * len(DEMONSTRATION_SEEDS):
        raise ValueError(f"at most {CONFIGURATIONS * len(DEMONSTRATION_SEEDS)} demonstrated episodes per task")
    frames, states, tasks, actions = [], [], [], []
    succeeded = 0
    for index, task in enumerate(task_set.tasks):
        expert = scripted_expert(task)
        rng = np.random.default_rng([seed, index])
        for block in range(0, episodes, CONFIGURATIONS):
            benchmark_seed = DEMONSTRATION_SEEDS[block // CONFIGURATIONS]
            env = MetaWorldTask(task, task_set.camera, task_set.image_size, benchmark_seed, max_steps)
            try:
                for episode in range(block, min(episodes, block + CONFIGURATIONS)):
                    f, s, a, ok = _episode(env, expert, episode, rng, action_noise, chunk, frame_every)
                    frames += f
                    states += s
                    actions.append(a)
                    tasks += [index] * len(s)
                    succeeded += ok
            finally:
                env.close()
        if progress:
            progress(f"demonstrations: {task} done ({len(states)} samples so far)")
    return Demonstrations(
        frames=np.stack(frames),
        states=np.asarray(states, dtype=np.float32).reshape(-1, STATE_DIM),
        tasks=np.asarray(tasks, dtype=np.int64),
        actions=np.concatenate(actions),
        task_names=tuple(task_set.tasks),
        episodes=episodes,
        expert_successes=succeeded,
    )
