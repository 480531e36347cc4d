"""The torch backend's quantized Linear modules and the shape rules that decide which layers they take: torch's CPU
int4 kernel (``Int4PackedLinear``), a torchao-quantized Linear run in bf16 inside an fp32 model (``CastLinear``:
CUDA int4, fp8), and torchao's quiet import."""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

GROUP_SIZES = (128, 64, 32)  # int4 group sizes, largest first (torch's int4 CPU kernel takes 32-256)
INT4_ROWS = 16  # the int4 CPU packing needs output features in multiples of 16
INT4_ACTIVATIONS = torch.bfloat16
CUDA_INT4_GROUP = 128  # torchao's CUDA int4 (tinygemm) group, as configured by the quantizer
FP8_MULTIPLE = 16  # torch._scaled_mm needs both widths of an fp8 weight in multiples of 16


def quiet_torchao_import() -> None:
    """Import torchao without its warnings about CUDA-only extension libraries a CPU torch cannot load, and torch's
    deprecation notice about how torchao registers an enum."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        import torchao  # noqa: F401
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class Int4PackedLinear(nn.Module):
    """A Linear whose weight is int4 in torch's CPU int4-pack layout; bf16 inside the kernel, fp32 outside."""

    def __init__(self, linear: nn.Linear, group: int) -> None:
        super().__init__()
        quiet_torchao_import()
        from torchao.quantization.utils import groupwise_affine_quantize_tensor

        self.in_features, self.out_features, self.group = linear.in_features, linear.out_features, group
        codes, scales_and_zeros = groupwise_affine_quantize_tensor(
            linear.weight.detach().float(), 4, group, INT4_ACTIVATIONS
        )
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.int(), 1))
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().float(), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features).to(INT4_ACTIVATIONS)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, self.group, self.scales_and_zeros)
        out = out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 group={self.group}"


class CastLinear(nn.Module):
    """Runs a torchao-quantized Linear that takes ``dtype`` activations from a model whose activations are fp32."""

    def __init__(self, inner: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.inner, self.dtype = inner, dtype

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x.to(self.dtype)).to(x.dtype)


def fp8_takes(linear: nn.Linear, device_type: str) -> bool:
    """Whether fp8 takes the layer on ``device_type``. CUDA: where ``torch._scaled_mm`` does (both widths multiples of
    ``FP8_MULTIPLE``; torchao leaves the others in bf16 without a word, so the quantizer keeps them float itself and
    counts them); CPU: any shape (weight-only, dequantized in each linear)."""
    return device_type == "cpu" or (linear.in_features % FP8_MULTIPLE == 0 and linear.out_features % FP8_MULTIPLE == 0)


def int4_group(linear: nn.Linear, device_type: str = "cpu") -> int | None:
    """The int4 group size for this layer's input width on ``device_type``, or None when the int4 kernels cannot take
    its shape. CUDA: ``CUDA_INT4_GROUP`` where it divides the input width (torchao leaves other layers in bf16 without
    a word); CPU: the largest of ``GROUP_SIZES`` that divides it, with output features in multiples of ``INT4_ROWS``."""
    if device_type != "cpu":
        return CUDA_INT4_GROUP if linear.in_features % CUDA_INT4_GROUP == 0 else None
    if linear.out_features % INT4_ROWS:
        return None
    return next((size for size in GROUP_SIZES if linear.in_features % size == 0), None)
