"""vlabench's bf16 attention (``kernels/amx_attention.py``), on each path this CPU runs (AMX tiles, AVX512-BF16),
against fp32 attention in plain torch: grouped K/V heads, additive masks (a fully masked row included), head sizes
32-256, key counts off the 32-key blocks; masked keys weigh exactly nothing; other inputs keep torch's kernel;
torch.compile keeps it as one call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.support.kernels import runnable_params
from vlabench.kernels import amx_int8

REASONS = {
    "amx": amx_int8.unavailable_reason("amx"),
    "avx512": amx_int8.unavailable_reason("vnni")
    or (None if "avx512_bf16" in amx_int8.read_cpu_flags() else "the AVX-512 path needs avx512_bf16"),
}


@pytest.fixture(params=runnable_params(REASONS))
def unit(request) -> str:
    """Each of the attention kernel's paths that runs on this CPU (an AMX CPU runs both)."""
    return request.param


BF16_MIN = torch.finfo(torch.bfloat16).min


def inputs(batch, heads, kv_heads, rows, keys, head, masked_share, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(batch, n, length, head, generator=generator).bfloat16()
        for n, length in ((heads, rows), (kv_heads, keys), (kv_heads, keys))
    )
    if not masked_share:
        return q, k, v, None
    allowed = torch.rand(batch, rows, keys, generator=generator) >= masked_share
    allowed[:, 0] = False  # a fully masked row: uniform weights, as SDPA gives
    return q, k, v, torch.zeros(batch, rows, keys, dtype=torch.bfloat16).masked_fill(~allowed, BF16_MIN)[:, None]


def reference(q, k, v, bias):
    """Attention in fp32 on the same bf16 values."""
    mask = None if bias is None else bias.float()
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize(
    ("batch", "heads", "kv_heads", "rows", "keys", "head", "masked_share"),
    [
        (1, 15, 5, 50, 291, 64, 0.1),  # SmolVLA's expert: its chunk over the prefix and itself
        (1, 15, 5, 50, 241, 64, 0.0),
        (2, 8, 1, 7, 33, 256, 0.3),  # π0's Gemma expert head size, one K/V head
        (1, 4, 2, 64, 100, 32, 0.5),
        (1, 6, 3, 20, 70, 64, 0.2),  # a last group of 4 query rows; keys ending mid-tile
        (1, 2, 2, 1, 1, 64, 0.0),  # a decode step over one key
        (1, 4, 4, 64, 1024, 64, 0.2),  # score rows of 1024 keys (4 KB of fp32): the scratch rows are padded
    ],
)
def test_matches_fp32_attention(batch, heads, kv_heads, rows, keys, head, masked_share, unit):
    from vlabench.kernels.amx_attention import AmxAttention, runs

    q, k, v, bias = inputs(batch, heads, kv_heads, rows, keys, head, masked_share)
    assert runs(q, k, v)
    with torch.inference_mode():
        out = AmxAttention(unit)(q, k, v, bias)
    assert out.shape == q.shape and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference(q, k, v, bias), rtol=0, atol=1.6e-2)


def test_masked_keys_weigh_nothing(unit):
    """Huge values behind the mask would show in the output if a masked key kept any weight at all."""
    from vlabench.kernels.amx_attention import AmxAttention

    q, k, v, _ = inputs(1, 4, 2, 20, 70, 64, 0.0)
    allowed = torch.ones(1, 20, 70, dtype=torch.bool)
    allowed[..., 40:] = False
    bias = torch.zeros(1, 20, 70, dtype=torch.bfloat16).masked_fill(~allowed, BF16_MIN)[:, None]
    poisoned = v.clone()
    poisoned[:, :, 40:] = 3e4
    with torch.inference_mode():
        out = AmxAttention(unit)(q, k, poisoned, bias)
    unmasked = reference(q, k[:, :, :40], v[:, :, :40], None)
    torch.testing.assert_close(out.float(), unmasked, rtol=0, atol=1.6e-2)


def test_other_inputs_keep_torchs_kernel(unit):
    from vlabench.kernels.amx_attention import MAX_QUERIES, AmxAttention, runs
    from vlabench.models.replicas.layers import attention

    long_q, k, v, _ = inputs(1, 2, 2, MAX_QUERIES + 1, 80, 64, 0.0)
    assert not runs(long_q, k, v)
    assert not runs(long_q[:, :, :8].float(), k.float(), v.float())
    assert not runs(*inputs(1, 2, 2, 8, 80, 48, 0.0)[:3])
    with torch.inference_mode():
        assert torch.equal(AmxAttention(unit)(long_q, k, v, None), attention(long_q, k, v, None))


def test_compiles_as_one_opaque_call(unit):
    from vlabench.kernels.amx_attention import AmxAttention

    module = AmxAttention(unit)
    q, k, v, bias = inputs(1, 6, 2, 50, 120, 64, 0.2)
    compiled = torch.compile(module, fullgraph=True, dynamic=False)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(q, k, v, bias), module(q, k, v, bias), rtol=0, atol=0)


def test_reads_strided_inputs_and_fp32_masks_in_place(unit):
    """Transposed q, k and v (projections' [B, S, H, D] seen as [B, H, S, D]), K/V as views of one stacked tensor, and
    an fp32 additive mask give the same result as their dense bf16 copies."""
    from vlabench.kernels.amx_attention import AmxAttention

    q, k, v, bias = inputs(1, 6, 2, 50, 77, 64, 0.2)

    def transposed(x):
        return x.transpose(-3, -2).contiguous().transpose(-3, -2)

    strided_q, stacked = transposed(q), transposed(torch.stack([k, v]))
    assert not strided_q.is_contiguous() and not stacked[0].is_contiguous()
    with torch.inference_mode():
        out = AmxAttention(unit)(strided_q, stacked[0], stacked[1], bias.float())
        dense = AmxAttention(unit)(q, k, v, bias)
    torch.testing.assert_close(out, dense, rtol=0, atol=0)
