"""Decoder-only language model (Llama/SmolLM2 or Gemma style) that fills the per-layer prefix K/V cache."""

from __future__ import annotations

from torch import Tensor, nn

from vlabench.replicas.layers import (
    GatedMLP,
    RMSNorm,
    SelfAttentionProjections,
    apply_rope,
    attention,
    merge_heads,
    split_heads,
)
from vlabench.specs import DecoderSpec, LanguageModelSpec


def mlp_activation(spec: DecoderSpec) -> str:
    return "silu" if spec.style == "llama" else "gelu_tanh"


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer with HF parameter names (``self_attn.q_proj``, ``mlp.gate_proj``, ...)."""

    def __init__(self, spec: DecoderSpec) -> None:
        super().__init__()
        gemma = spec.style == "gemma"
        self.input_layernorm = RMSNorm(spec.hidden, spec.rms_eps, gemma_offset=gemma)
        self.self_attn = SelfAttentionProjections(spec.hidden, spec.heads, spec.kv_heads, spec.head_dim)
        self.post_attention_layernorm = RMSNorm(spec.hidden, spec.rms_eps, gemma_offset=gemma)
        self.mlp = GatedMLP(spec.hidden, spec.intermediate, mlp_activation(spec))

    def forward(self, h: Tensor, cos: Tensor, sin: Tensor, bias: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Returns the new hidden state and this layer's post-RoPE keys and values (B, kv_heads, S, head_dim)."""
        attn = self.self_attn
        x = self.input_layernorm(h)
        q = apply_rope(split_heads(attn.q_proj(x), attn.heads), cos, sin)
        k = apply_rope(split_heads(attn.k_proj(x), attn.kv_heads), cos, sin)
        v = split_heads(attn.v_proj(x), attn.kv_heads)
        h = h + attn.o_proj(merge_heads(attention(q, k, v, bias)))
        return h + self.mlp(self.post_attention_layernorm(h)), k, v


class TextDecoder(nn.Module):
    """The VLM's language model truncated to the kept layers; ``lm_head`` only where the checkpoint holds one."""

    def __init__(self, spec: LanguageModelSpec) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleList(DecoderLayer(spec) for _ in range(spec.layers))
        self.norm = RMSNorm(spec.hidden, spec.rms_eps, gemma_offset=spec.style == "gemma")
        self.lm_head = None if spec.tie_embeddings else nn.Linear(spec.hidden, spec.vocab, bias=False)

    def forward(self, h: Tensor, cos: Tensor, sin: Tensor, bias: Tensor) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """Embedded prefix -> (final-norm hidden, per-layer keys, per-layer values)."""
        keys, values = [], []
        for layer in self.layers:
            h, k, v = layer(h, cos, sin, bias)
            keys.append(k)
            values.append(v)
        return self.norm(h), keys, values
