"""Architecture replicas built from model specs, with seeded random weights."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path

import torch
from torch import nn

from vlabench.models.replicas.flow_vla import ExpertKV, FlowMatchingVLA, Observation, PrefixCache
from vlabench.models.replicas.layers import RMSNorm
from vlabench.models.specs import ModelSpec

__all__ = [
    "ExpertKV",
    "FlowMatchingVLA",
    "Observation",
    "PrefixCache",
    "build_replica",
    "count_parameters",
    "replica_class",
]

INIT_STD = 0.02


def replica_class(spec: ModelSpec) -> type[nn.Module]:
    """The replica module of ``spec``'s family (its spec class's ``replica``)."""
    module, name = spec.replica.split(":")
    return getattr(import_module(module), name)


def count_parameters(spec: ModelSpec) -> int:
    """Exact parameter count of the replica, built on the meta device (no memory allocated)."""
    with torch.device("meta"):
        model = replica_class(spec)(spec)
    return sum(p.numel() for p in model.parameters())


def build_replica(
    spec: ModelSpec,
    seed: int,
    dtype: torch.dtype,
    device: torch.device,
    transform: Callable[[str, nn.Module], nn.Module | None] | None = None,
) -> nn.Module:
    """Allocate the replica directly in ``dtype`` on ``device`` and fill it with seeded weights, or with the
    spec's ``--checkpoint`` weights when it names one.

    Weights are drawn in fp32 on the CPU in a fixed parameter order, so every precision and device gets the
    same values (rounded), which the correctness gate relies on. With ``transform`` (e.g. a quantizer) the replica
    is built module by module: each module is allocated, filled and handed to ``transform(name, module)``, whose
    result (when not None) replaces it, so the whole float model never exists at once (a checkpoint is loaded
    whole first, then transformed).
    """
    with torch.device("meta"):
        model = replica_class(spec)(spec)
    if transform is not None and spec.checkpoint is None:
        return _build_streamed(model, seed, dtype, device, transform).eval().requires_grad_(False)
    model = model.to(dtype).to_empty(device=device)  # allocated at ``dtype``: a bf16 7B never exists in fp32
    initialize_weights(model, seed)
    if spec.checkpoint is not None:
        from vlabench.models.checkpoints import load_checkpoint

        load_checkpoint(model, Path(spec.checkpoint.rsplit(":", 2)[0]))
    if transform is not None:
        transform_modules(model, transform)
    return model.eval().requires_grad_(False)


def transform_modules(model: nn.Module, transform: Callable[[str, nn.Module], nn.Module | None]) -> None:
    """``transform(name, module)`` over a built model's modules; each result that is not None replaces its module."""
    for name, module in list(model.named_modules()):
        _replace(model, name, transform(name, module))


@torch.no_grad()
def initialize_weights(model: nn.Module, seed: int) -> None:
    """Every matrix or kernel (≥ 2-D parameter) ~ N(0, 0.02) in module order; biases 0; norm scales at identity
    (Gemma-style RMSNorm offsets at 0); running statistics at mean 0, variance 1; buffers that hold tables the
    module computed at construction are recomputed by ``reset_tables``."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        initialize_module(module, generator)


@torch.no_grad()
def initialize_module(module: nn.Module, generator: torch.Generator) -> None:
    """``initialize_weights`` for one module's own parameters and buffers, drawing from ``generator``."""
    for name, param in module.named_parameters(recurse=False):
        if param.dim() >= 2:
            param.copy_(torch.randn(param.shape, generator=generator) * INIT_STD)
        elif name.endswith("bias") or (isinstance(module, RMSNorm) and module.gemma_offset):
            param.zero_()
        else:
            param.fill_(1.0)
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        module.running_mean.zero_()
        module.running_var.fill_(1.0)
    reset = getattr(module, "reset_tables", None)
    if callable(reset):
        reset()


def _build_streamed(
    model: nn.Module,
    seed: int,
    dtype: torch.dtype,
    device: torch.device,
    transform: Callable[[str, nn.Module], nn.Module | None],
) -> nn.Module:
    """Allocate, fill and transform one module at a time, in ``initialize_weights``'s order (same values)."""
    generator = torch.Generator().manual_seed(seed)
    for name in [name for name, _ in model.named_modules()]:  # names only: a replaced module is freed at once
        module = model.get_submodule(name)
        module.to_empty(device=device, recurse=False)
        for key, tensor in [*module._parameters.items(), *module._buffers.items()]:
            if tensor is not None and tensor.is_floating_point() and tensor.dtype != dtype:
                converted = tensor.to(dtype)
                if key in module._parameters:
                    module._parameters[key] = nn.Parameter(converted, requires_grad=False)
                else:
                    module._buffers[key] = converted
        initialize_module(module, generator)
        _replace(model, name, transform(name, module))
    return model


def _replace(model: nn.Module, name: str, replacement: nn.Module | None) -> None:
    if replacement is not None and name:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, replacement)
