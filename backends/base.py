"""The one backend interface: a backend prepares a model for a target and returns a two-phase policy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from vlabench.replicas import Observation, PrefixCache
from vlabench.specs import ModelSpec
from vlabench.workload import Workload

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class PreparedPolicy(ABC):
    """A model ready to run on one target. Phase 1 is ``embed_images`` + ``prefill``; phase 2 ``denoise_step``."""

    @abstractmethod
    def embed_images(self, obs: Observation) -> Tensor: ...

    @abstractmethod
    def prefill(self, obs: Observation, image_tokens: Tensor) -> PrefixCache: ...

    @abstractmethod
    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor: ...

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
        """A whole-loop replacement for the Sampler (e.g. a captured CUDA graph), reported as its own variant."""
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


@dataclass(frozen=True)
class BackendOptions:
    """Backend-specific knobs from the run config."""

    ep: str | None = None  # onnxruntime execution provider
    device_target: str | None = None  # openvino device: CPU, GPU, NPU, ...
    compile_mode: str = "default"  # torch.compile mode
    fuse_denoise_loop: bool = False  # torch-compile on CUDA: replay the whole denoise loop as one CUDA graph
    profile_nodes: bool = False  # onnxruntime / openvino: enable the runtime's per-node profiler
    fuse_expert_kv: bool = False  # torch backends: hoist the expert's prefix K/V work out of the denoising loop


class Backend(ABC):
    name: str

    @classmethod
    def from_options(cls, options: BackendOptions) -> Backend:
        return cls()

    def precisions(self, device: torch.device) -> tuple[str, ...]:
        """Precisions this backend runs on ``device``."""
        return tuple(PRECISIONS)

    @abstractmethod
    def unavailable_reason(self, device: torch.device) -> str | None:
        """None when the backend can run on ``device`` here, else why not (shown to the user)."""

    @abstractmethod
    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> PreparedPolicy:
        """Build the seeded replica and make it runnable on ``device`` at ``precision``."""


class GraphPolicy(PreparedPolicy):
    """A policy made of the three exported graphs (see ``onnx_export.GRAPHS``); subclasses run one graph."""

    def __init__(self, details: dict[str, Any]) -> None:
        self._details = details

    @abstractmethod
    def run_graph(self, graph: str, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        """Run ``graph`` on the named inputs it has (extra feeds are ignored); outputs by name."""

    def embed_images(self, obs: Observation) -> Tensor:
        return self.run_graph("vision", {"images": obs.images})["image_tokens"]

    def prefill(self, obs: Observation, image_tokens: Tensor) -> PrefixCache:
        feeds = {
            "image_tokens": image_tokens,
            "language_tokens": obs.language_tokens,
            "language_mask": obs.language_mask,
            "state": obs.state,
        }
        out = self.run_graph("prefill", feeds)
        return PrefixCache(keys=out["keys"], values=out["values"], valid=out["valid"], state=obs.state)

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        feeds = {"x_t": x_t, "t": t, "keys": cache.keys, "values": cache.values, "valid": cache.valid}
        return self.run_graph("denoise", {**feeds, "state": cache.state})["velocity"].to(x_t.dtype)

    def details(self) -> dict[str, Any]:
        return self._details
