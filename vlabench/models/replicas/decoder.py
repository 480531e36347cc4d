"""Decoder-only language model (Llama/SmolLM2 or Gemma style) that fills the per-layer prefix K/V cache."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vlabench.models.replicas.layers import GatedMLP, RMSNorm, SelfAttentionProjections, merge_heads
from vlabench.models.specs import DecoderSpec, LanguageModelSpec


def mlp_activation(spec: DecoderSpec) -> str:
    return "gelu_tanh" if spec.style == "gemma" else "silu"


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer with HF parameter names (``self_attn.q_proj``, ``mlp.gate_proj``, ...)."""

    def __init__(self, spec: DecoderSpec) -> None:
        super().__init__()
        gemma = spec.style == "gemma"
        qk_norm = spec.rms_eps if spec.style == "qwen3" else None
        self.input_layernorm = RMSNorm(spec.hidden, spec.rms_eps, gemma_offset=gemma)
        self.self_attn = SelfAttentionProjections(
            spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, qk_norm_eps=qk_norm
        )
        self.post_attention_layernorm = RMSNorm(spec.hidden, spec.rms_eps, gemma_offset=gemma)
        self.mlp = GatedMLP(spec.hidden, spec.intermediate, mlp_activation(spec))

    def forward(
        self, h: Tensor, cos: Tensor, sin: Tensor, bias: Tensor, past: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Returns the new hidden state and this layer's post-RoPE keys and values (B, kv_heads, S, head_dim) of
        ``h``; with ``past`` (cached keys, values) the queries attend to [past ; own] and ``bias`` covers both."""
        attn = self.self_attn
        x = self.input_layernorm(h)
        q, k, v = attn.queries_keys_values(x, cos, sin)
        all_k, all_v = (torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)) if past else (k, v)
        h = h + attn.o_proj(merge_heads(attn.attend(q, all_k, all_v, bias)))
        return h + self.mlp(self.post_attention_layernorm(h)), k, v


class TextDecoder(nn.Module):
    """The VLM's language model truncated to the kept layers; ``lm_head`` only where the checkpoint holds one."""

    def __init__(self, spec: LanguageModelSpec) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleList(DecoderLayer(spec) for _ in range(spec.layers))
        self.norm = RMSNorm(spec.hidden, spec.rms_eps, gemma_offset=spec.style == "gemma")
        self.lm_head = None if spec.tie_embeddings else nn.Linear(spec.hidden, spec.vocab, bias=False)

    def forward(
        self,
        h: Tensor,
        cos: Tensor,
        sin: Tensor,
        bias: Tensor,
        past: tuple[Tensor, Tensor] | None = None,
        final_norm: bool = True,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """Embedded tokens -> (hidden, per-layer keys, per-layer values) of those tokens. ``past``: stacked cached
        (layers, B, kv_heads, T, head_dim) keys and values to attend to (a decode step)."""
        keys, values = [], []
        for index, layer in enumerate(self.layers):
            h, k, v = layer(h, cos, sin, bias, (past[0][index], past[1][index]) if past else None)
            keys.append(k)
            values.append(v)
        return (self.norm(h) if final_norm else h), keys, values
