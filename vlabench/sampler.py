"""The one denoising loop. Every backend exposes ``denoise_step``; only the Sampler decides which steps run."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import torch
from torch import Tensor

from vlabench.replicas import PrefixCache


class DenoisingPolicy(Protocol):
    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor: ...


StepSpan = Callable[[int], AbstractContextManager]


class EulerSampler:
    """Flow matching with Euler steps from t = 1 (noise) to t = 0 (actions), dt = -1 / steps (openpi/lerobot)."""

    def __init__(self, steps: int, batch: int, device: torch.device) -> None:
        self.steps = steps
        self.dt = -1.0 / steps
        self.times = [torch.full((batch,), 1.0 + i * self.dt, device=device) for i in range(steps)]

    def sample(self, policy: DenoisingPolicy, cache: PrefixCache, noise: Tensor, step_span: StepSpan | None = None):
        x_t = noise
        for index, t in enumerate(self.times):
            with step_span(index) if step_span else nullcontext():
                x_t = x_t + self.dt * policy.denoise_step(x_t, t, cache)
        return x_t
