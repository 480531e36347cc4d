"""vlabench's bf16 attention on Intel AMX (``amx_attention.cpp``), for the replicas' float parts under the AMX
int8 scheme (issue 19, section 3).

Why it exists: at bf16 the expert's attention (50 queries over 291 keys, grouped K/V heads) took about 0.5-0.75 ms
per call through torch's CPU flash-attention kernel, some 16 times a denoising step, about a third of the step once
the weight matmuls ran on the AMX int8 kernel. This one runs both products on AMX bf16 tiles against K and V packed
once per call, with the softmax in fp32 between them. It is built with the int8 linear, into the same extension
(``amx_int8.extension()``), and registered as ``vlabench::amx_attention``. On CPUs with AVX512-BF16 and no AMX
(AMD Zen 4) the same kernel runs its products with VDPBF16PS on the same packed K and V
(``vlabench::avx512_attention``): torch's CPU flash attention took about 0.55 ms per expert call there, about a
quarter of a denoising step on the int8 kernel's VNNI path.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from vlabench.kernels.amx_int8 import ATTENTION_UNITS, extension
from vlabench.models.replicas.layers import attention

HEAD_MULTIPLE = 32  # head sizes the kernel takes: whole 64-byte rows of bf16 pairs
MAX_QUERIES = 64
"""Query rows per head the kernel takes: one task's block (the expert's chunk, a decode step). Longer sequences (the
vision tower's 1024 patches) keep torch's flash-attention kernel, which tiles the keys; this one holds a whole score
row and measured slower there (issue 19's notes)."""


def runs(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether the kernel takes these inputs: bf16, at most ``MAX_QUERIES`` query rows, head size a multiple of 32,
    whole groups of query heads per K/V head."""
    return (
        q.dtype == k.dtype == v.dtype == torch.bfloat16
        and q.dim() == k.dim() == 4
        and q.shape[2] <= MAX_QUERIES
        and q.shape[-1] % HEAD_MULTIPLE == 0
        and q.shape[1] % k.shape[1] == 0
    )


class AmxAttention(nn.Module):
    """The replicas' attention (``layers.Attention``) on the kernel's ``unit`` path where it takes the inputs, else
    as before."""

    def __init__(self, unit: str = "amx") -> None:
        super().__init__()
        if unit not in ATTENTION_UNITS:
            raise ValueError(f"no attention kernel path '{unit}' (the paths are {', '.join(ATTENTION_UNITS)})")
        extension()
        self.unit = unit

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
        if not runs(q, k, v):
            return attention(q, k, v, bias)
        operator = getattr(torch.ops.vlabench, f"{self.unit}_attention")
        return operator(q, k, v, bias, 1 / math.sqrt(q.shape[-1]))

    def extra_repr(self) -> str:
        return f"unit={self.unit}"
