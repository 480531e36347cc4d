"""The one denoising loop. Every backend exposes ``denoise_step``; only the Sampler decides which steps run."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import torch
from torch import Tensor

from vlabench.dp_cache import DPCacheSchedule
from vlabench.replicas import PrefixCache


class DenoisingPolicy(Protocol):
    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor: ...


StepSpan = Callable[[int], AbstractContextManager]


class EulerSampler:
    """Flow matching with Euler steps from t = 1 (noise) to t = 0 (actions), dt = -1 / steps (openpi/lerobot).

    With a DP-Cache schedule, a skipped step reuses the latest computed velocity instead of calling the expert."""

    def __init__(self, steps: int, batch: int, device: torch.device, schedule: DPCacheSchedule | None = None) -> None:
        if schedule is not None and schedule.steps != steps:
            raise ValueError(f"DP-Cache schedule for {schedule.steps} steps used with {steps}")
        self.steps = steps
        self.dt = -1.0 / steps
        self.times = [torch.full((batch,), 1.0 + i * self.dt, device=device) for i in range(steps)]
        self.computed = frozenset(schedule.computed if schedule else range(steps))
        self.schedule = schedule

    def sample(
        self,
        policy: DenoisingPolicy,
        cache: PrefixCache,
        noise: Tensor,
        step_span: StepSpan | None = None,
        steps: range | None = None,
        velocity: Tensor | None = None,
    ) -> Tensor:
        """Run ``steps`` (default: all) from ``noise``; only computed steps are spanned and call the expert.
        ``velocity`` seeds the reuse when a run starts after step 0 (see ``sample_partial``)."""
        return self.sample_partial(policy, cache, noise, step_span, steps, velocity)[0]

    def sample_partial(
        self,
        policy: DenoisingPolicy,
        cache: PrefixCache,
        x_t: Tensor,
        step_span: StepSpan | None = None,
        steps: range | None = None,
        velocity: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Some of the steps, returning the new x_t and the latest velocity (for V-AEFusion's split loop)."""
        for index in steps if steps is not None else range(self.steps):
            if index in self.computed or velocity is None:
                with step_span(index) if step_span else nullcontext():
                    velocity = policy.denoise_step(x_t, self.times[index], cache)
            x_t = x_t + self.dt * velocity
        return x_t, velocity
