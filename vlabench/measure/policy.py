"""What the timing loop runs: a model prepared for one target, split into the prefix and the action phase.

Backends (``vlabench.backends``) produce a ``PreparedPolicy``; ``measure`` times it without knowing the runtime.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from vlabench.hardware.targets import ExecutionTarget
from vlabench.measure.cold_start import Preparation
from vlabench.models.replicas import Observation, PrefixCache


class PreparedPolicy(ABC):
    """A model ready to run on one target. Phase 1 is ``embed_images`` + ``prefill``; phase 2 ``denoise_step``."""

    preparation: Preparation | None = None  # how long preparing it took, stage by stage (set by whoever timed it)

    @abstractmethod
    def embed_images(self, obs: Observation) -> Tensor: ...

    @abstractmethod
    def prefill(self, obs: Observation, image_tokens: Tensor) -> PrefixCache: ...

    @abstractmethod
    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor: ...

    def decode_step(self, token: Tensor, cache: Any) -> tuple[Tensor, Tensor, Tensor]:
        """Token decoders: one token (B, 1) -> (action logits, its keys, its values); see ``GreedyDecoder``."""
        raise NotImplementedError(f"{type(self).__name__} does not decode tokens")

    @abstractmethod
    def executed_on(self) -> ExecutionTarget:
        """Where the prepared model runs, read back from the runtime (torch parameters, ORT session providers,
        OpenVINO ``EXECUTION_DEVICES``, the CUDA device of TensorRT engines)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until all work queued on the target has finished."""

    def prefix(self, obs: Observation) -> PrefixCache:
        return self.prefill(obs, self.embed_images(obs))

    def prefix_lane(self) -> Callable[[Observation], PrefixCache]:
        """A prefix function whose caches stay valid while other lanes run (its own static buffers, where the
        backend keeps any): one per control loop when several loops share this policy."""
        return self.prefix

    def fused_loop(self) -> Callable[[PrefixCache, Tensor], Tensor] | None:
        """A whole-loop replacement for the action loop (e.g. a captured CUDA graph), reported as its own variant."""
        return None

    def details(self) -> dict[str, Any]:
        """Backend settings recorded in the result (threads, modes, versions)."""
        return {}

    def node_events(self) -> list[NodeEvent]:
        """The runtime's own per-node profile (when prepared with ``profile_nodes``), on the perf_counter clock."""
        return []


@dataclass(frozen=True)
class NodeEvent:
    """One executed graph node as the runtime's profiler reported it."""

    graph: str
    name: str
    op_type: str
    start_ns: int
    end_ns: int
    args: dict[str, Any]
