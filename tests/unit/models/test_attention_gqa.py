"""Grouped-query attention reads the shared K/V heads in place (no expanded copy), with the numbers of the
explicit expansion; the ONNX export keeps the explicit form."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from vlabench.models.replicas.layers import attention


class OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def grouped_inputs(dtype: torch.dtype):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 15, 50, 64, generator=generator).to(dtype)
    k = torch.randn(1, 5, 291, 64, generator=generator).to(dtype)
    v = torch.randn(1, 5, 291, 64, generator=generator).to(dtype)
    allowed = torch.rand(1, 1, 50, 291, generator=generator) > 0.2
    bias = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return q, k, v, bias


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_attention_equals_the_explicit_expansion(dtype):
    q, k, v, bias = grouped_inputs(dtype)
    expanded = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=bias)
    tolerance = 1e-2 if dtype == torch.bfloat16 else 1e-6
    torch.testing.assert_close(attention(q, k, v, bias), expanded, rtol=0, atol=tolerance)


def test_grouped_attention_makes_no_expanded_copy_of_the_keys_and_values():
    q, k, v, bias = grouped_inputs(torch.float32)
    with OpRecorder() as recorder:
        attention(q, k, v, bias)
    assert "aten.repeat_interleave" not in recorder.ops
    assert not any(op.startswith("aten.expand") or op == "aten.clone" for op in recorder.ops)


def test_the_traced_export_expands_the_heads_explicitly():
    q, k, v, bias = grouped_inputs(torch.float32)
    graph = torch.jit.trace(lambda q, k, v, b: attention(q, k, v, b), (q, k, v, bias)).graph
    assert "aten::repeat_interleave" in str(graph)
