"""``vlabench calibrate dp-cache``: choose the DP-Cache schedule that skips the most steps within an error budget.

Exact inferences (fp32 eager torch, the model's own action loop from ``make_action_loop``: Euler for flow-matching
heads, DDPM/DDIM for noise-predicting ones, so a skipped step means what ``vlabench run --dp-cache`` executes) over many
seeded observations give each step's velocity (or predicted noise); the step-to-step cosine similarity of those says
where the trajectory is stable. The schedule is then chosen greedily, while the worst observation's error
(max |Δ actions| / max |exact actions − noise|) stays within the budget:

- loops of up to ``EXHAUSTIVE_UP_TO`` steps: starting from every step computed, each round drops the step whose
  reuse raises the error least (every remaining step is tried; cubic in the steps);
- longer loops (Diffusion Policy's 100 DDPM steps): each step is tried once, the most similar velocity first, and
  dropped if the error stays within the budget (quadratic in the steps).

All candidate schedules are evaluated on the same observations and noise, batched for the torch replica; the
actions may come from another backend (``Candidate``), against the same fp32 eager exact path.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import BaseModel
from torch import Tensor

from vlabench.measure.action_loops import DenoisingPolicy
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.models.replicas import build_replica
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.optimizations.candidates import (
    EXACT,
    Candidate,
    LoopFactory,
    exact_arithmetic,
    model_loop,
    require_denoising_loop,
)
from vlabench.optimizations.fidelity import action_error

EXHAUSTIVE_UP_TO = 16


class CalibrationReport(BaseModel):
    observations: int
    budget: float
    step_similarity: list[float]  # cosine(v_i, v_{i-1}) averaged over observations; index 0 is 1 by definition
    candidates_evaluated: int
    error: float  # the chosen schedule's worst relative error
    path: list[dict]  # each accepted drop: step, error after it
    search: str = "exhaustive greedy"
    loop: str | None = None  # the action loop: euler, ddpm or ddim
    weights: str | None = None  # "seeded (seed N)" or the checkpoint's stamp (resolved path:size:mtime)
    candidate: str = EXACT  # what computed the schedules' actions (the exact path is always fp32 eager torch)
    baseline_error: float = 0.0  # the candidate's error with every step computed (0 for the exact path itself)


@dataclass
class Lane:
    """Computes action chunks over the calibration observations: one (cache, noise) group per batched call."""

    policy: DenoisingPolicy
    groups: list[tuple[Any, Tensor]]
    loop: LoopFactory
    context: Callable[[], AbstractContextManager]

    def actions(self, schedule: DPCacheSchedule | None, policy: DenoisingPolicy | None = None) -> Tensor:
        with self.context():
            return torch.cat(
                [
                    self.loop(schedule, noise.shape[0]).sample(policy or self.policy, cache, noise)
                    for cache, noise in self.groups
                ]
            )

    @property
    def noise(self) -> Tensor:
        return torch.cat([noise for _, noise in self.groups])


def calibrate_dp_cache(
    spec: ModelSpec,
    workload: Workload,
    observations: int,
    budget: float,
    seed: int,
    device: torch.device,
    candidate: Candidate | None = None,
) -> DPCacheSchedule:
    """Calibrate over seeded synthetic observations against the fp32 eager torch replica (the spec's weights: seeded,
    or its checkpoint); the schedules' actions come from the same replica, or from ``candidate``."""
    require_denoising_loop(spec, "DP-Cache")
    model = build_replica(spec, seed, torch.float32, device)
    inputs = [
        (
            synthetic_observation(spec, workload, seed + i, torch.float32, device),
            initial_noise(workload, seed + i, torch.float32, device),
        )
        for i in range(observations)
    ]
    loop = model_loop(spec, workload, device)
    with exact_arithmetic(device):
        caches = [model.prefix(obs) for obs, _ in inputs]
    if candidate is None:
        batch = (type(caches[0]).concat(caches), torch.cat([noise for _, noise in inputs]))
        exact = trial = Lane(model, [batch], loop, lambda: exact_arithmetic(device))
    else:
        groups = [(cache, noise) for cache, (_, noise) in zip(caches, inputs, strict=True)]
        exact = Lane(model, groups, loop, lambda: exact_arithmetic(device))
        with torch.inference_mode():
            policy, dtype = candidate.policy, candidate.dtype
            trial_groups = [(policy.prefix(candidate.observation(obs)), noise.to(dtype)) for obs, noise in inputs]
        trial = Lane(policy, trial_groups, loop, torch.inference_mode)
    weights = spec.checkpoint or f"seeded (seed {seed})"
    via = candidate.description if candidate else EXACT
    details = {"loop": workload.action_loop, "weights": weights, "candidate": via}
    return choose_schedule(exact, trial, workload.steps, budget, f"{spec.name} ({weights}) via {via}", details)


class _Recorder:
    """Wraps a policy to keep each computed step's velocity."""

    def __init__(self, policy: DenoisingPolicy) -> None:
        self.policy = policy
        self.velocities: list[Tensor] = []

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: Any) -> Tensor:
        velocity = self.policy.denoise_step(x_t, t, cache)
        self.velocities.append(velocity)
        return velocity


def step_similarity(velocities: list[Tensor], steps: int) -> list[float]:
    """Mean cosine of consecutive steps' velocities; ``velocities`` holds each group's ``steps`` calls in turn."""
    groups = len(velocities) // steps
    per_step = [torch.cat([velocities[g * steps + i] for g in range(groups)]) for i in range(steps)]
    return [1.0] + [float(F.cosine_similarity(a.flatten(1), b.flatten(1), dim=1).mean()) for a, b in pairwise(per_step)]


def choose_schedule(
    exact_lane: Lane, trial_lane: Lane, steps: int, budget: float, subject: str, details: dict | None = None
) -> DPCacheSchedule:
    """Greedy: drop steps whose reuse costs least, while the worst observation stays within ``budget``."""
    noise = exact_lane.noise
    recorder = _Recorder(exact_lane.policy)
    exact = exact_lane.actions(None, recorder)
    similarity = step_similarity(recorder.velocities, steps)

    def error_of(computed: tuple[int, ...]) -> float:
        return action_error(trial_lane.actions(DPCacheSchedule(steps=steps, computed=computed)), exact, noise).relative

    baseline = 0.0 if trial_lane is exact_lane else error_of(tuple(range(steps)))
    if steps <= EXHAUSTIVE_UP_TO:
        search = "exhaustive greedy: each round drops the step whose reuse costs least"
        computed, evaluated, path, error = _exhaustive(error_of, steps, budget, baseline)
    else:
        search = "similarity-ordered greedy: each step tried once, most similar velocity first"
        computed, evaluated, path, error = _ordered(error_of, steps, budget, baseline, similarity)
    report = CalibrationReport(
        observations=int(noise.shape[0]),
        budget=budget,
        step_similarity=similarity,
        candidates_evaluated=evaluated,
        error=error,
        path=path,
        search=search,
        baseline_error=baseline,
        **(details or {}),
    )
    return DPCacheSchedule(
        steps=steps,
        computed=computed,
        source=f"calibrated on {subject}: {report.observations} observations, budget {budget:g}",
        calibration=report.model_dump(),
    )


ErrorOf = Callable[[tuple[int, ...]], float]


def _exhaustive(error_of: ErrorOf, steps: int, budget: float, error: float) -> tuple[tuple[int, ...], int, list, float]:
    computed, evaluated, path = tuple(range(steps)), 0, []
    while len(computed) > 1:
        trials = {step: error_of(tuple(s for s in computed if s != step)) for step in computed[1:]}
        evaluated += len(trials)
        step, trial_error = min(trials.items(), key=lambda item: (item[1], -item[0]))
        if trial_error > budget:
            break
        computed = tuple(s for s in computed if s != step)
        error = trial_error
        path.append({"dropped": step, "error": trial_error})
    return computed, evaluated, path, error


def _ordered(
    error_of: ErrorOf, steps: int, budget: float, error: float, similarity: list[float]
) -> tuple[tuple[int, ...], int, list, float]:
    computed, path = set(range(steps)), []
    order = sorted(range(1, steps), key=lambda step: (-similarity[step], step))
    for step in order:
        trial = tuple(sorted(computed - {step}))
        trial_error = error_of(trial)
        if trial_error <= budget:
            computed.remove(step)
            error = trial_error
            path.append({"dropped": step, "error": trial_error})
    return tuple(sorted(computed)), len(order), path, error
