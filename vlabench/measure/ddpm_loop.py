"""DDPM and DDIM sampling of a noise-predicting action head (diffusers' schedulers, as Diffusion Policy uses them:
``squaredcos_cap_v2`` betas, epsilon prediction, sample clipping, fixed-small variance)."""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import Tensor

from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.models.spec_base import DiffusionActionSpec

NOISE_SEED = 0  # DDPM's per-step variance noise is drawn once, so every backend (and every row) sees the same draws


def betas(action: DiffusionActionSpec) -> Tensor:
    if action.beta_schedule == "linear":
        return torch.linspace(action.beta_start, action.beta_end, action.train_timesteps, dtype=torch.float64)

    def alpha_bar(step: float) -> float:
        return math.cos((step + 0.008) / 1.008 * math.pi / 2) ** 2

    count = action.train_timesteps
    return torch.tensor(
        [min(1 - alpha_bar((i + 1) / count) / alpha_bar(i / count), 0.999) for i in range(count)], dtype=torch.float64
    )


class DiffusionLoop:
    """Runs the noise predictor at ``steps`` timesteps, from T-1 down; with a DP-Cache schedule a skipped step
    reuses the latest predicted noise. DDPM adds the scheduler's variance noise; DDIM (eta 0) is deterministic."""

    def __init__(
        self,
        action: DiffusionActionSpec,
        steps: int,
        shape: tuple[int, int, int],
        device: torch.device,
        schedule: DPCacheSchedule | None = None,
    ) -> None:
        if schedule is not None and schedule.steps != steps:
            raise ValueError(f"DP-Cache schedule for {schedule.steps} steps used with {steps}")
        self.action = action
        self.steps = steps
        self.schedule = schedule
        self.computed = frozenset(schedule.computed if schedule else range(steps))
        ratio = action.train_timesteps // steps
        self.timesteps = [(steps - 1 - i) * ratio for i in range(steps)]
        self.ratio = ratio
        self.alphas = torch.cumprod(1 - betas(action), 0)
        self.times = [torch.full((shape[0],), float(t), device=device) for t in self.timesteps]
        generator = torch.Generator().manual_seed(NOISE_SEED)
        row = (1, *shape[1:])  # one draw per step for every row: a batched chunk equals its rows run one by one
        self.variance_noise = [torch.randn(row, generator=generator).expand(shape).to(device) for _ in range(steps)]

    def _update(self, index: int, epsilon: Tensor, sample: Tensor) -> Tensor:
        step = self.timesteps[index]
        previous = step - self.ratio
        alpha = float(self.alphas[step])
        alpha_prev = float(self.alphas[previous]) if previous >= 0 else 1.0
        original = (sample - math.sqrt(1 - alpha) * epsilon) / math.sqrt(alpha)
        if self.action.clip_sample:
            original = original.clamp(-self.action.clip_sample_range, self.action.clip_sample_range)
        if self.action.scheduler == "ddim":
            return math.sqrt(alpha_prev) * original + math.sqrt(1 - alpha_prev) * epsilon
        current_alpha = alpha / alpha_prev
        current_beta = 1 - current_alpha
        mean = (math.sqrt(alpha_prev) * current_beta / (1 - alpha)) * original + (
            math.sqrt(current_alpha) * (1 - alpha_prev) / (1 - alpha)
        ) * sample
        if step == 0:
            return mean
        variance = max((1 - alpha_prev) / (1 - alpha) * current_beta, 1e-20)
        return mean + math.sqrt(variance) * self.variance_noise[index].to(sample.dtype)

    def sample(self, policy, cache, noise: Tensor, step_span=None, steps: range | None = None, velocity=None) -> Tensor:
        return self.sample_partial(policy, cache, noise, step_span, steps, velocity)[0]

    def sample_partial(
        self, policy, cache, x_t: Tensor, step_span=None, steps: range | None = None, velocity: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """``velocity`` here is the latest predicted noise (what DP-Cache reuses)."""
        for index in steps if steps is not None else range(self.steps):
            if index in self.computed or velocity is None:
                with step_span(index) if step_span else nullcontext():
                    velocity = policy.denoise_step(x_t, self.times[index], cache)
            x_t = self._update(index, velocity.to(x_t.dtype), x_t)
        return x_t, velocity
