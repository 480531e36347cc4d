"""Architecture replicas built from model specs, with seeded random weights."""

from __future__ import annotations

import torch
from torch import nn

from vlabench.replicas.flow_vla import ExpertKV, FlowMatchingVLA, Observation, PrefixCache
from vlabench.replicas.layers import AdaptiveRMSNorm, RMSNorm
from vlabench.specs import ModelSpec

__all__ = ["ExpertKV", "FlowMatchingVLA", "Observation", "PrefixCache", "build_replica", "count_parameters"]

INIT_STD = 0.02


def count_parameters(spec: ModelSpec) -> int:
    """Exact parameter count of the replica, built on the meta device (no memory allocated)."""
    with torch.device("meta"):
        model = FlowMatchingVLA(spec)
    return sum(p.numel() for p in model.parameters())


def build_replica(spec: ModelSpec, seed: int, dtype: torch.dtype, device: torch.device) -> FlowMatchingVLA:
    """Allocate the replica directly in ``dtype`` on ``device`` and fill it with seeded weights.

    Weights are drawn in fp32 on the CPU in a fixed parameter order, so every precision and device gets the
    same values (rounded), which the correctness gate relies on.
    """
    with torch.device("meta"):
        model = FlowMatchingVLA(spec)
    model = model.to_empty(device=device).to(dtype)
    initialize_weights(model, seed)
    return model.eval().requires_grad_(False)


@torch.no_grad()
def initialize_weights(model: nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Conv2d | nn.Embedding):
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * INIT_STD)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, RMSNorm):
            module.weight.fill_(0.0 if module.gemma_offset else 1.0)
        elif not isinstance(module, AdaptiveRMSNorm) and any(True for _ in module.parameters(recurse=False)):
            raise TypeError(f"no initializer for {type(module).__name__}")
