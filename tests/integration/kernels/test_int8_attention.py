"""vlabench's int8 attention on AVX2 (``kernels/int8_attention.py``) against a reference of its scheme written here
in plain torch (q 8-bit per token, k less its mean then 7-bit per key, probabilities as u8 codes, v 7-bit per
channel) and against exact fp32 attention: the vision towers' shapes, grouped K/V heads, head sizes and key counts
off the kernel's blocks, strided inputs; the smoothing leaves a shift of every key without effect; the output needs
no copy to merge heads; other inputs keep torch's kernel; torch.compile keeps it as one call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vlabench.kernels import amx_int8

REASON = amx_int8.unavailable_reason("avx2")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"the AVX2 int8 kernel cannot run here: {REASON}")


def codes(x: torch.Tensor, dim: int, qmax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric codes of x along dim in [-qmax, qmax] (round half to even) and their scales (1 where all zero)."""
    absmax = x.abs().amax(dim=dim, keepdim=True)
    scale = torch.where(absmax > 0, absmax / qmax, torch.ones_like(absmax))
    return torch.round(x / scale).clamp(-qmax, qmax), scale


def scheme_reference(q, k, v, scale):
    """The kernel's scheme in fp64 arithmetic on its codes."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    q_codes, q_scale = codes(q, -1, 127)
    k_codes, k_scale = codes(k - k.mean(dim=2, keepdim=True), -1, 63)
    v_codes, v_scale = codes(v, 2, 63)
    scores = (q_codes.double() @ k_codes.double().transpose(-1, -2)) * q_scale * k_scale.transpose(-1, -2) * scale
    p_codes = torch.round(255 * torch.exp(scores - scores.amax(-1, keepdim=True)))
    return ((p_codes @ v_codes.double()) * v_scale / p_codes.sum(-1, keepdim=True)).float()


def kernel(q, k, v):
    amx_int8.extension("avx2")
    return torch.ops.vlabench.avx2_int8_attention(q, k, v, q.shape[-1] ** -0.5)


def heads(batch, count, length, size, generator, shift=0.0):
    """[batch, count, length, size] as a projection's output splits into heads: a strided view of [B, T, H * D]."""
    flat = torch.randn(batch, length, count * size, generator=generator) + shift
    return flat.view(batch, length, count, size).transpose(1, 2)


SHAPES = [
    (1, 12, 12, 1024, 64),  # SmolVLA's SigLIP: 1024 patches per camera, head size 64
    (1, 16, 16, 256, 72),  # π0's SigLIP So400m: 256 patches, head size 72 (not a multiple of 8)
    (2, 8, 2, 131, 40),  # grouped K/V heads; keys off the 4- and 16-key blocks; query rows off the 4-row passes
    (1, 4, 4, 261, 64),  # DINOv2-style: 256 patches + class and register tokens
    (1, 2, 1, 37, 20),  # a head size off the 8-wide vectors: the packing's scalar tails
]


@pytest.mark.parametrize(("batch", "count", "kv_count", "length", "size"), SHAPES)
def test_the_kernel_computes_its_scheme(batch, count, kv_count, length, size):
    generator = torch.Generator().manual_seed(length)
    q = heads(batch, count, length, size, generator)
    k = heads(batch, kv_count, length, size, generator, shift=0.7)
    v = heads(batch, kv_count, length, size, generator)
    out = kernel(q, k, v)
    expected = scheme_reference(q, k, v, size**-0.5)
    assert out.shape == q.shape
    # the kernel's exp is a polynomial (relative error below 5e-5): a probability code now and then one step off
    assert (out - expected).norm() / expected.norm() < 2e-3
    exact = F.scaled_dot_product_attention(q, k, v, enable_gqa=count != kv_count)
    assert (out - exact).norm() / exact.norm() < 0.1  # int8's loss, what the correctness gate then judges


def test_sharp_attention_follows_its_strongest_key_to_int8_precision():
    """Scores far apart (a peaked softmax, as trained models' often are): the output is the chosen value's row."""
    generator = torch.Generator().manual_seed(1)
    k = torch.randn(1, 2, 300, 64, generator=generator)
    q = 20 * k[:, :, 7:8].repeat(1, 1, 5, 1)  # every query aligned with key 7
    v = torch.randn(1, 2, 300, 64, generator=generator)
    out = kernel(q, k, v)
    chosen = v[:, :, 7:8].expand_as(out)
    assert torch.allclose(out, chosen, atol=2 * v.abs().amax().item() / 63)


def test_shifting_every_key_by_one_vector_changes_nothing():
    """q . (k + c) adds q . c to a whole score row, which the softmax ignores; the kernel takes each key less the
    keys' mean, so the codes, and the output, are the same up to a code flipped by the fp32 rounding of the shifted
    keys (without the smoothing the shift would widen each key's range, its codes some ten times coarser)."""
    generator = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 4, 256, 64, generator=generator) for _ in range(3))
    shift = 5 * torch.randn(64, generator=generator)
    shifted, plain = kernel(q, k + shift, v), kernel(q, k, v)
    assert (shifted - plain).norm() / plain.norm() < 2e-3


def test_the_output_merges_heads_without_a_copy():
    generator = torch.Generator().manual_seed(3)
    q, k, v = (heads(2, 4, 200, 64, generator) for _ in range(3))
    out = kernel(q, k, v)
    merged = out.transpose(1, 2).reshape(2, 200, 256)  # layers.merge_heads
    assert merged.data_ptr() == out.data_ptr() and merged.is_contiguous()


def test_saturating_codes_stay_exact():
    """The largest pair sums in both products. q rows of one magnitude, signs by pairs of channels: codes 127 (255
    offset) on the positive pairs; keys of the same pattern (their mean is zero, so their codes are exactly +-63):
    a VPMADDUBSW pair of q k sums 2 x 255 x 63 = 32130. Keys come in identical adjacent pairs, so the best pair's
    probability codes are both 255, against v codes of +-63 (every key's v row alike): 32130 again. Both stay below
    the int16 limit, so the kernel still computes its scheme."""
    pattern = torch.tensor([1.0, 1.0, -1.0, -1.0]).repeat(16)
    sign = torch.where(torch.arange(256) // 2 % 2 == 0, 1.0, -1.0)  # keys (0, 1) +, (2, 3) -, ...
    k = (sign[:, None] * pattern)[None, None]
    q = (torch.linspace(0.05, 0.3, 8)[:, None] * pattern)[None, None]
    v = torch.linspace(-1, 1, 64).expand(256, 64)[None, None]
    assert torch.equal(k - k.mean(dim=2, keepdim=True), k)
    out = kernel(q, k, v)
    expected = scheme_reference(q, k, v, 0.125)
    assert expected.abs().amax() > 0.9
    assert (out - expected).norm() / expected.norm() < 2e-3


@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_input_is_not_hidden_by_the_codes(where, bad):
    """Codes alone would turn a NaN or an infinity into finite garbage; the kernel gives NaN instead, wherever
    torch's kernel gives a non-finite output and more (a bad q: its row; a bad k or v: its head's rows)."""
    generator = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 64, 32, generator=generator) for _ in range(3))
    {"q": q, "k": k, "v": v}[where][0, 1, 5, 3] = bad
    out = kernel(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v)
    assert not expected.isfinite().all() and (out.isfinite() <= expected.isfinite()).all()
    rows = out[0, 1].isfinite().all(dim=-1)
    assert rows.tolist() == [i != 5 for i in range(64)] if where == "q" else not rows.any()
    assert out[:, 0].isfinite().all()  # the other head is untouched


def test_a_range_too_small_to_quantize_codes_as_zero_not_garbage():
    """Keys (less their mean) and values within 1e-38 of zero: their inverse scales would overflow to infinity; they
    quantize as zero, so the output is the uniform average of zero values."""
    generator = torch.Generator().manual_seed(7)
    q = torch.randn(1, 1, 32, 64, generator=generator)
    k = torch.randn(1, 1, 64, 64, generator=generator) * 1e-38
    v = torch.randn(1, 1, 64, 64, generator=generator) * 1e-38
    assert torch.equal(kernel(q, k, v), torch.zeros(1, 1, 32, 64))


@pytest.mark.parametrize(
    "case",
    ["masked", "bf16", "few queries", "gradient", "values wider"],
)
def test_other_inputs_keep_torchs_kernel(case):
    from vlabench.kernels.int8_attention import MIN_QUERIES, Int8Attention
    from vlabench.models.replicas.layers import attention

    generator = torch.Generator().manual_seed(4)
    queries = MIN_QUERIES - 1 if case == "few queries" else MIN_QUERIES
    q = torch.randn(1, 4, queries, 64, generator=generator)
    k, v = (torch.randn(1, 4, 300, 64, generator=generator) for _ in range(2))
    bias = torch.zeros(1, 1, queries, 300) if case == "masked" else None
    if case == "bf16":
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    if case == "values wider":  # torch's attention takes v wider than q and k; the kernel does not
        v = torch.randn(1, 4, 300, 96, generator=generator)
    q.requires_grad_(case == "gradient")
    assert torch.equal(Int8Attention()(q, k, v, bias), attention(q, k, v, bias))
    plain = (q.detach().float(), k.float(), v[..., :64].float())
    if case != "few queries":  # the same inputs in fp32, unmasked, without a gradient do take the kernel
        assert not torch.equal(Int8Attention()(*plain, None), attention(*plain, None))


def test_torch_compile_keeps_the_kernel_as_one_call():
    from torch._dynamo.testing import CompileCounterWithBackend

    from vlabench.kernels.int8_attention import Int8Attention

    module = Int8Attention()
    generator = torch.Generator().manual_seed(5)
    q, k, v = (heads(1, 4, 256, 64, generator) for _ in range(3))
    counter = CompileCounterWithBackend("inductor")
    merged = lambda q, k, v: module(q, k, v, None).transpose(1, 2).reshape(1, 256, 256)  # noqa: E731
    compiled = torch.compile(merged, backend=counter)
    with torch.inference_mode():
        out = compiled(q, k, v)
    assert counter.frame_count == 1
    assert torch.equal(out, kernel(q, k, v).transpose(1, 2).reshape(1, 256, 256))
