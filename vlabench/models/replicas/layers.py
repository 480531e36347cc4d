"""Transformer building blocks shared by every replica (export-friendly: no complex RoPE, no nn.RMSNorm)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """RMSNorm in the Llama form (``weight * norm(x)``) or the Gemma form (``(1 + weight) * norm(x)``)."""

    def __init__(self, dim: int, eps: float, gemma_offset: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.gemma_offset = gemma_offset
        self.weight = nn.Parameter(torch.zeros(dim) if gemma_offset else torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        if self.gemma_offset:
            return (normed * (1.0 + self.weight.float())).type_as(x)
        return self.weight * normed.type_as(x)


class AdaptiveRMSNorm(nn.Module):
    """π0.5's adaRMSNorm: scale, shift and residual gate predicted from a conditioning vector."""

    def __init__(self, dim: int, cond_dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)

    def forward(self, x: Tensor, cond: Tensor) -> tuple[Tensor, Tensor]:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        scale, shift, gate = self.dense(cond).unsqueeze(1).chunk(3, dim=-1)
        return (normed * (1 + scale.float()) + shift.float()).to(x.dtype), gate


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Rotate-half RoPE tables for integer ``positions`` (B, S) -> cos, sin of shape (B, 1, S, head_dim)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32)[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


ROPE_TABLE_POSITIONS = 4096  # positions a RotaryTable holds (SmolVLA's expert, 3 cameras, reaches 291)


class RotaryTable(nn.Module):
    """``rope_cos_sin`` tabulated once for positions [0, ``positions``): a step gathers its rows. Computed from the
    positions inside a compiled step instead, Inductor inlines pow, cos and sin into every layer that applies them,
    element by element. The tables are buffers left out of the state dict, recomputed by ``reset_tables`` after a
    replica is allocated (``build_replica``)."""

    def __init__(self, head_dim: int, theta: float, positions: int = ROPE_TABLE_POSITIONS) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta
        self.register_buffer("cos", torch.empty(positions, head_dim), persistent=False)
        self.register_buffer("sin", torch.empty(positions, head_dim), persistent=False)
        self.reset_tables()

    @torch.no_grad()
    def reset_tables(self) -> None:
        """Fill the tables on their device, rounded to their dtype once (as ``rope_cos_sin`` rounds its result)."""
        positions = torch.arange(self.cos.shape[0], device=self.cos.device)[None]
        cos, sin = rope_cos_sin(positions, self.head_dim, self.theta, torch.float32)
        self.cos.copy_(cos[0, 0])
        self.sin.copy_(sin[0, 0])

    def forward(self, positions: Tensor, bound: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``rope_cos_sin`` at integer ``positions`` (B, S) in [0, ``bound``), ``bound`` known from the inputs'
        shapes; past the table they are computed as ``rope_cos_sin`` does."""
        if bound > self.cos.shape[0]:
            return rope_cos_sin(positions, self.head_dim, self.theta, dtype)
        return self.cos[positions][:, None].to(dtype), self.sin[positions][:, None].to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, S, heads*D) -> (B, heads, S, D)."""
    batch, seq, _ = x.shape
    return x.view(batch, seq, heads, -1).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, heads, S, D) -> (B, S, heads*D)."""
    batch, heads, seq, dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * dim)


def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
    """Scaled dot-product attention with grouped K/V heads (GQA); ``bias`` is additive, shape (B, 1, S, T).
    SDPA reads each shared K/V head for its group of query heads (``enable_gqa``) instead of a copy expanded to
    every query head; the ONNX export expands explicitly (opset 18 has no grouped attention). Same numbers."""
    if torch.jit.is_tracing():  # the TorchScript-based ONNX export: shapes are traced tensors here
        groups = q.shape[1] // k.shape[1]
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=q.shape[1] != k.shape[1])


class Attention(nn.Module):
    """The attention a block calls: ``attention``. A module of its own so a backend can swap in another kernel with
    the same forward (``kernels/amx_attention.py``), as it swaps Linear layers."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
        return attention(q, k, v, bias)


def additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """Boolean (B, S, T) "may attend" -> additive bias (B, 1, S, T); fully masked rows stay finite."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)[
        :, None
    ]


def block_mask(query_blocks: Tensor, key_blocks: Tensor, key_valid: Tensor) -> Tensor:
    """Prefix-LM mask: a query sees every valid key whose block index is not after its own (lerobot/openpi)."""
    return (key_blocks[:, None, :] <= query_blocks[:, :, None]) & key_valid[:, None, :]


def sinusoidal_time_embedding(t: Tensor, dim: int, min_period: float, max_period: float) -> Tensor:
    """openpi/lerobot sine-cosine embedding of the flow time ``t`` (B,) -> (B, dim)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float32, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angles = (2 * math.pi / period)[None, :] * t.float()[:, None]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class SharedInputProjections(nn.Module):
    """An attention block whose q, k and v projections read one input: ``project`` gives the three, through
    ``fused_qkv`` (one module returning all three) where a kernel set one, else through ``q_proj``, ``k_proj`` and
    ``v_proj``."""

    def __init__(self) -> None:
        super().__init__()
        self.fused_qkv: nn.Module | None = None
        self.shares_input = True  # False: k and v read another input than q (cross-attention), never fused

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k and v of ``x``, heads not yet split."""
        if self.fused_qkv is not None:
            return self.fused_qkv(x)
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)


class SelfAttentionProjections(SharedInputProjections):
    """q/k/v/o projections of a decoder attention block (HF parameter names); ``kv_in`` gives k and v an input of
    their own (a cross-attention block, whose q, k and v never share one)."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        kv_in: int | None = None,
        qk_norm_eps: float | None = None,
    ) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.shares_input = kv_in is None
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(kv_in or hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(kv_in or hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.attend = Attention()
        if qk_norm_eps is not None:  # Qwen3: RMSNorm over each head's queries and keys, before RoPE
            self.q_norm = RMSNorm(head_dim, qk_norm_eps)
            self.k_norm = RMSNorm(head_dim, qk_norm_eps)
        self.qk_norm = qk_norm_eps is not None

    def queries_keys_values(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Post-RoPE queries and keys and the values of ``x``, split into heads."""
        q, k, v = self.project(x)
        q, k = split_heads(q, self.heads), split_heads(k, self.kv_heads)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), split_heads(v, self.kv_heads)


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "gelu": F.gelu,
    "identity": nn.Identity(),  # an MLP whose first projection already applied its activation (a fused kernel)
}
"""The feed-forward activations by name, as the MLPs below hold them (a kernel can take one over by name)."""


class GatedMLP(nn.Module):
    """SiLU-gated (Llama) or tanh-GELU-gated (Gemma GeGLU) feed-forward block."""

    def __init__(self, hidden: int, intermediate: int, activation: str) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(ACTIVATIONS[self.activation](self.gate_proj(x)) * self.up_proj(x))


class PointwiseMLP(nn.Module):
    """fc2(act(fc1(x))): SigLIP's and timm's ViT MLPs (tanh GELU; DINOv2's exact GELU)."""

    def __init__(self, hidden: int, intermediate: int, activation: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(ACTIVATIONS[self.activation](self.fc1(x)))
