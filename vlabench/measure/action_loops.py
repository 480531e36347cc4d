"""The action loops. Every backend exposes ``denoise_step`` (and ``decode_step`` for token decoders); only the
action loop decides which steps run. ``make_action_loop`` picks the loop a model's spec declares."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import torch
from torch import Tensor

from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.models.replicas import PrefixCache
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload


class DenoisingPolicy(Protocol):
    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor: ...


StepSpan = Callable[[int], AbstractContextManager]


class ActionLoop(Protocol):
    """What the runner needs from an action loop (Euler, DDPM/DDIM, single pass, greedy decoding)."""

    steps: int
    computed: frozenset[int]

    def sample(self, policy, cache, noise: Tensor, step_span: StepSpan | None = None) -> Tensor: ...

    def sample_partial(
        self, policy, cache, x_t: Tensor, step_span=None, steps: range | None = None, velocity=None
    ) -> tuple[Tensor, Tensor | None]: ...


class EulerLoop:
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


class SinglePass:
    """Heads that predict the whole chunk in one call (ACT, OpenVLA-OFT): one span, ``denoise_step`` once."""

    def __init__(self, batch: int, device: torch.device) -> None:
        self.steps = 1
        self.computed = frozenset({0})
        self.schedule = None
        self.times = [torch.zeros(batch, device=device)]

    def sample(self, policy, cache, noise: Tensor, step_span=None, steps: range | None = None, velocity=None) -> Tensor:
        return self.sample_partial(policy, cache, noise, step_span, steps, velocity)[0]

    def sample_partial(
        self, policy, cache, x_t: Tensor, step_span=None, steps: range | None = None, velocity=None
    ) -> tuple[Tensor, None]:
        with step_span(0) if step_span else nullcontext():
            actions = policy.denoise_step(x_t, self.times[0], cache)
        return actions.to(x_t.dtype), None


def make_action_loop(
    spec: ModelSpec, workload: Workload, device: torch.device, schedule: DPCacheSchedule | None = None
) -> ActionLoop:
    """The action loop ``spec`` declares, at the workload's step count and chunk shape."""
    if workload.action_loop == "euler":
        return EulerLoop(workload.steps, workload.batch, device, schedule)
    if workload.action_loop in ("ddpm", "ddim"):
        from vlabench.measure.ddpm_loop import DiffusionLoop

        shape = (workload.batch, workload.chunk, workload.action_dim)
        return DiffusionLoop(spec.action, workload.steps, shape, device, schedule)
    if schedule is not None:
        raise ValueError(f"DP-Cache needs a denoising loop; {spec.name} runs {workload.action_loop}")
    if workload.action_loop == "single_pass":
        return SinglePass(workload.batch, device)
    from vlabench.measure.token_decoding import GreedyDecoder

    return GreedyDecoder(spec, workload.steps)
