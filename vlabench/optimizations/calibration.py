"""``vlabench calibrate dp-cache``: choose the DP-Cache schedule that skips the most steps within an error budget.

Exact inferences (fp32 eager torch) over many seeded observations give each step's velocity; the step-to-step
cosine similarity of those velocities says where the trajectory is stable. The schedule is then chosen greedily:
starting from every step computed, repeatedly drop the step whose reuse raises the action error least, while the
worst observation's error (max |Δ actions| / max |exact actions − noise|) stays within the budget. All candidate
schedules are evaluated on the same observations and noise, batched.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pydantic import BaseModel
from torch import Tensor

from vlabench.measure.action_loops import DenoisingPolicy, EulerSampler
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.models.replicas import FlowMatchingVLA, PrefixCache, build_replica
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.optimizations.fidelity import action_error


class CalibrationReport(BaseModel):
    observations: int
    budget: float
    step_similarity: list[float]  # cosine(v_i, v_{i-1}) averaged over observations; index 0 is 1 by definition
    candidates_evaluated: int
    error: float  # the chosen schedule's worst relative error
    path: list[dict]  # each accepted drop: step, error after it


def batched_inputs(
    model: FlowMatchingVLA, spec: ModelSpec, workload: Workload, observations: int, seed: int, device: torch.device
) -> tuple[PrefixCache, Tensor]:
    """The prefix caches and noise of ``observations`` seeded observations, concatenated along the batch."""
    caches, noises = [], []
    with torch.inference_mode():
        for index in range(observations):
            obs = synthetic_observation(spec, workload, seed + index, torch.float32, device)
            caches.append(model.prefix(obs))
            noises.append(initial_noise(workload, seed + index, torch.float32, device))
    return PrefixCache.concat(caches), torch.cat(noises)


class _Recorder:
    """Wraps a policy to keep each computed step's velocity."""

    def __init__(self, policy: DenoisingPolicy) -> None:
        self.policy = policy
        self.velocities: list[Tensor] = []

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: Any) -> Tensor:
        velocity = self.policy.denoise_step(x_t, t, cache)
        self.velocities.append(velocity)
        return velocity


def calibrate_dp_cache(
    spec: ModelSpec, workload: Workload, observations: int, budget: float, seed: int, device: torch.device
) -> DPCacheSchedule:
    """Calibrate on the model replica (fp32 eager torch) over seeded synthetic observations."""
    model = build_replica(spec, seed, torch.float32, device)
    cache, noise = batched_inputs(model, spec, workload, observations, seed, device)
    return choose_schedule(model, cache, noise, workload.steps, budget, f"{spec.name} replica")


def choose_schedule(
    policy: DenoisingPolicy, cache: Any, noise: Tensor, steps: int, budget: float, subject: str
) -> DPCacheSchedule:
    """Greedy: drop the step whose reuse costs least, while the worst observation stays within ``budget``."""
    batch, device = noise.shape[0], noise.device
    recorder = _Recorder(policy)
    with torch.inference_mode():
        exact = EulerSampler(steps, batch, device).sample(recorder, cache, noise)
        similarity = [1.0] + [
            float(F.cosine_similarity(a.flatten(1), b.flatten(1), dim=1).mean())
            for a, b in zip(recorder.velocities, recorder.velocities[1:], strict=False)
        ]

        def error_of(computed: tuple[int, ...]) -> float:
            schedule = DPCacheSchedule(steps=steps, computed=computed)
            actions = EulerSampler(steps, batch, device, schedule).sample(policy, cache, noise)
            return action_error(actions, exact, noise).relative

        computed, evaluated, path, error = tuple(range(steps)), 0, [], 0.0
        while len(computed) > 1:
            trials = {step: error_of(tuple(s for s in computed if s != step)) for step in computed[1:]}
            evaluated += len(trials)
            step, trial_error = min(trials.items(), key=lambda item: (item[1], -item[0]))
            if trial_error > budget:
                break
            computed = tuple(s for s in computed if s != step)
            error = trial_error
            path.append({"dropped": step, "error": trial_error})
    report = CalibrationReport(
        observations=batch,
        budget=budget,
        step_similarity=similarity,
        candidates_evaluated=evaluated,
        error=error,
        path=path,
    )
    return DPCacheSchedule(
        steps=steps,
        computed=computed,
        source=f"calibrated on {subject}: {batch} observations, budget {budget:g}",
        calibration=report.model_dump(),
    )
