"""V-AEFusion: overlap the VLM prefix of observation t with the first denoising steps on cycle t−1's prefix cache.

Cycle 0 runs synchronously. At cycle t ≥ 1 the prefix of observation t starts on a worker thread (its own CUDA
stream on CUDA) while the first ``stale_steps`` Euler steps run on the previous cycle's cache; once the fresh cache
is ready the remaining steps run on it, the first of them always computed (never a reused stale velocity).
With ``concurrent=False`` the same arithmetic runs one phase after the other (used for fidelity, where only the
result matters).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import torch
from torch import Tensor

from vlabench.measure.action_loops import DenoisingPolicy, EulerLoop
from vlabench.models.replicas import PrefixCache

PAPER_COLLAPSE_AT = 7  # the paper saw task success collapse from 7 stale steps of 10 on


@dataclass(frozen=True)
class CycleSpans:
    """Perf-counter ns of one control cycle and its parts (the stale part is absent on synchronous cycles)."""

    start: int
    end: int
    prefix: tuple[int, int]
    stale: tuple[int, int] | None
    fresh: tuple[int, int]

    @property
    def latency_ms(self) -> float:
        return (self.end - self.start) / 1e6

    @property
    def overlap_ms(self) -> float:
        """Time the prefix and the stale steps actually ran at once."""
        if self.stale is None:
            return 0.0
        return max(0, min(self.prefix[1], self.stale[1]) - max(self.prefix[0], self.stale[0])) / 1e6


class FusionLoop:
    """Runs control cycles; keeps the previous cycle's prefix cache."""

    def __init__(
        self,
        prefix: Callable[[Any], PrefixCache],
        policy: DenoisingPolicy,
        loop: EulerLoop,
        synchronize: Callable[[], None],
        stale_steps: int,
        device: torch.device,
        concurrent: bool = True,
    ) -> None:
        if not 0 <= stale_steps <= loop.steps:
            raise ValueError(f"stale steps must be within 0..{loop.steps}, got {stale_steps}")
        self.prefix, self.policy, self.loop = prefix, policy, loop
        self.synchronize = synchronize
        self.stale_steps = stale_steps
        self.concurrent = concurrent
        self.device = device
        self.previous: PrefixCache | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlabench-prefix") if concurrent else None
        self._stream = torch.cuda.Stream(device) if concurrent and device.type == "cuda" else None

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown()

    def cycle(self, observation: Any, noise: Tensor) -> tuple[Tensor, CycleSpans]:
        start = perf_counter_ns()
        steps = self.loop.steps
        if self.previous is None or self.stale_steps == 0:
            cache = self.prefix(observation)
            self.synchronize()
            prefix_done = perf_counter_ns()
            actions = self.loop.sample(self.policy, cache, noise)
            self.synchronize()
            end = perf_counter_ns()
            self.previous = cache
            return actions, CycleSpans(start, end, (start, prefix_done), None, (prefix_done, end))
        stale_cache = self.previous
        future = self._worker.submit(self._timed_prefix, observation) if self._worker is not None else None
        if future is None:
            cache, prefix_span = self._timed_prefix(observation)
        stale_begin = perf_counter_ns()
        x_t, _ = self.loop.sample_partial(self.policy, stale_cache, noise, steps=range(self.stale_steps))
        self.synchronize()
        stale_end = perf_counter_ns()
        if future is not None:
            cache, prefix_span = future.result()
        fresh_start = perf_counter_ns()
        actions, _ = self.loop.sample_partial(self.policy, cache, x_t, steps=range(self.stale_steps, steps))
        self.synchronize()
        end = perf_counter_ns()
        self.previous = cache
        return actions, CycleSpans(start, end, prefix_span, (stale_begin, stale_end), (fresh_start, end))

    def _timed_prefix(self, observation: Any) -> tuple[PrefixCache, tuple[int, int]]:
        begin = perf_counter_ns()
        with torch.cuda.stream(self._stream) if self._stream is not None else nullcontext():
            cache = self.prefix(observation)
            if self._stream is not None:
                self._stream.synchronize()
            else:
                self.synchronize()
        return cache, (begin, perf_counter_ns())
