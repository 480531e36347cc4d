"""vlabench's int8 attention on AVX2 (``avx2_attention.cpp``), for the replicas' long unmasked attention (the vision
towers) under the AVX2 int8 scheme (issue 19: int8 on CPUs without native bf16).

Why it exists: with every linear on the int8 kernel's AVX2 path, torch's fp32 flash attention was the largest cost of
SmolVLA's vision phase after the linears (three cameras of 1024 patches, emulated AVX2 class, ``torch.profiler``).
This one runs both of attention's products on the linear's int8 block product, SageAttention-style: q per token
8-bit, k smoothed (less its mean over the keys, which leaves the softmax unchanged) and per key 7-bit, the fp32
softmax's probabilities as u8 codes, v per channel 7-bit. It is lossy like the int8 linears, and what it changes in a
model's actions is what the correctness gate measures. It is built into the AVX2 library with the linear
(``amx_int8.extension("avx2")``) and registered as ``vlabench::avx2_int8_attention``. Masked attention (the VLM's
prefix-LM mask, the expert's chunk) keeps torch's fp32 kernel.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from vlabench.kernels.amx_int8 import extension
from vlabench.models.replicas.layers import attention

MAX_KEYS = 1 << 16  # the kernel's int32 sums of p v stay exact up to here
MIN_QUERIES = 16
"""Fewer query rows keep torch's kernel: K and V are packed on every call, which only enough rows repay (one or four
queries over 300 keys ran slower than torch's fp32 kernel, 16 faster; a vision tower's 16 to 1024 patches all
faster)."""


def runs(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> bool:
    """Whether the kernel takes these inputs: fp32 on the CPU, no mask, no gradient wanted (the kernel has no
    backward), rows contiguous, k and v of one shape with q's batch and head size, at least ``MIN_QUERIES`` queries,
    1 to ``MAX_KEYS`` keys, whole groups of query heads per K/V head."""
    return (
        bias is None
        and q.dtype == k.dtype == v.dtype == torch.float32
        and q.device.type == k.device.type == v.device.type == "cpu"
        and not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
        and q.dim() == k.dim() == v.dim() == 4
        and k.shape == v.shape
        and k.shape[0] == q.shape[0]
        and k.shape[3] == q.shape[3]
        and q.stride(-1) == k.stride(-1) == v.stride(-1) == 1
        and q.shape[2] >= MIN_QUERIES
        and 0 < k.shape[2] <= MAX_KEYS
        and k.shape[1] > 0
        and q.shape[1] % k.shape[1] == 0
    )


class Int8Attention(nn.Module):
    """The replicas' attention (``layers.Attention``) on the AVX2 int8 kernel where it takes the inputs, else as
    before."""

    def __init__(self) -> None:
        super().__init__()
        extension("avx2")

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
        if not runs(q, k, v, bias):
            return attention(q, k, v, bias)
        return torch.ops.vlabench.avx2_int8_attention(q, k, v, 1 / math.sqrt(q.shape[-1]))

    def extra_repr(self) -> str:
        return f"int8 AVX2 kernel unmasked from {MIN_QUERIES} queries, else torch's"
