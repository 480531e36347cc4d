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

    def decode_step(self, token: Tensor, cache: Any) -> tuple[Tensor, Tensor, Tensor]:
        """Token decoders: one token (B, 1) -> (action logits, its keys, its values); see ``GreedyDecoder``."""
        raise NotImplementedError(f"{type(self).__name__} does not decode tokens")

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
    """A policy made of exported graphs (see ``onnx_export.graph_signatures``); subclasses run one graph."""

    def __init__(self, details: dict[str, Any], graphs: dict[str, tuple[list[str], list[str]]], cache_type: type):
        self._details = details
        self.graphs = graphs
        self.cache_type = cache_type
        step = graphs.get("denoise") or graphs["decode"]
        self.cache_names = step[0][2 if "denoise" in graphs else 1 :]

    @abstractmethod
    def run_graph(self, graph: str, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        """Run ``graph`` on the named inputs it has (extra feeds are ignored); outputs by name."""

    def embed_images(self, obs: Observation) -> Tensor:
        return self.run_graph("vision", {"images": obs.images})["image_tokens"]

    def prefill(self, obs: Observation, image_tokens: Tensor) -> Any:
        feeds = {
            "image_tokens": image_tokens,
            "language_tokens": obs.language_tokens,
            "language_mask": obs.language_mask,
            "state": obs.state,
        }
        computed = self.run_graph("prefill", feeds)
        handed = {name: feeds[name] for name in self.cache_names if name not in computed}
        return self.cache_type(**computed, **handed)

    def _cache_feeds(self, cache: Any) -> dict[str, Tensor]:
        return {name: getattr(cache, name) for name in self.cache_names}

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: Any) -> Tensor:
        feeds = {"x_t": x_t, "t": t, **self._cache_feeds(cache)}
        return self.run_graph("denoise", feeds)["velocity"].to(x_t.dtype)

    def decode_step(self, token: Tensor, cache: Any) -> tuple[Tensor, Tensor, Tensor]:
        out = self.run_graph("decode", {"token": token, **self._cache_feeds(cache)})
        return out["logits"], out["new_keys"], out["new_values"]

    def details(self) -> dict[str, Any]:
        return self._details
