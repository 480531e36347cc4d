"""Eager PyTorch on CPU or CUDA: the reference backend."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from vlabench.backends.base import PRECISIONS, Backend, PreparedPolicy
from vlabench.replicas import FlowMatchingVLA, Observation, PrefixCache, build_replica
from vlabench.specs import ModelSpec
from vlabench.workload import Workload


class TorchPolicy(PreparedPolicy):
    def __init__(self, model: FlowMatchingVLA, device: torch.device) -> None:
        self.model = model
        self.device = device

    @torch.inference_mode()
    def embed_images(self, obs: Observation) -> Tensor:
        return self.model.embed_images(obs.images)

    @torch.inference_mode()
    def prefill(self, obs: Observation, image_tokens: Tensor) -> PrefixCache:
        return self.model.prefill(obs, image_tokens)

    @torch.inference_mode()
    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        return self.model.denoise_step(x_t, t, cache)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def details(self) -> dict[str, Any]:
        return {
            "mode": "eager",
            "torch": torch.__version__,
            "intra_op_threads": torch.get_num_threads(),
            "sdpa": "torch.nn.functional.scaled_dot_product_attention",
        }


class TorchBackend(Backend):
    name = "torch"

    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type == "cuda" and not torch.cuda.is_available():
            return f"torch {torch.__version__} has no usable CUDA device (CUDA build: {torch.version.cuda or 'no'})"
        return None

    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> PreparedPolicy:
        return TorchPolicy(build_replica(spec, seed, PRECISIONS[precision], device), device)
