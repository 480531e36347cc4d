"""GR00T N1.5 and N1.6 replicas: Eagle VLM features, N1.5's VL self-attention adapter, and a flow-matching DiT head.

Sources: NVIDIA/Isaac-GR00T ``gr00t/model/backbone/eagle_backbone.py`` (select_layer 12, pre-norm features),
``gr00t/model/action_head/{flow_matching_action_head.py, cross_attention_dit.py, action_encoder.py}``; lerobot
v0.5.1 ``src/lerobot/policies/groot/``. Phase 1 runs SigLIP2 + pixel shuffle + MLP, the first Qwen3 layers and the
4-block VL self-attention once; each denoising step runs the state/action encoders, the 16 DiT blocks (even blocks
cross-attend to the VL features, odd blocks self-attend over [state ; future tokens ; actions]) and the decoder.
N1.6 (``gr00t/model/gr00t_n1d6/gr00t_n1d6.py``, ``gr00t/model/modules/{eagle_backbone.py, dit.py}``): 16 Qwen3 layers
read after the final norm, no adapter and no future tokens, and 32 DiT blocks whose cross-attention blocks alternate
between the text tokens and the image tokens (``AlternateVLDiT``: masks over the same keys).

GR00T integrates τ from 0 (noise) to 1 with x ← x + dτ·v; the shared Euler loop runs t from 1 to 0 with
x ← x − dt·f, so the step uses τ = 1 − t and returns f = −v (the same trajectory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlabench.models.replicas.caches import BatchedCache
from vlabench.models.replicas.decoder import TextDecoder
from vlabench.models.replicas.flow_vla import Observation
from vlabench.models.replicas.layers import additive_mask, block_mask, rope_cos_sin
from vlabench.models.replicas.vision import SiglipVisionTower, build_connector
from vlabench.models.specs import Gr00tSpec

EMBODIMENT = 0  # which of the per-embodiment encoder/decoder slices the replica runs


@dataclass
class FeatureCache(BatchedCache):
    """The adapted VL features the DiT cross-attends to at every step."""

    features: Tensor  # (B, P, llm_hidden)
    valid: Tensor  # (B, P) bool
    state: Tensor  # (B, state_dim)
    image: Tensor | None = None  # (B, P) bool: the image tokens, for N1.6's alternating cross-attention


def sinusoid(values: Tensor, channels: int, flip: bool, shift: float) -> Tensor:
    """diffusers ``get_timestep_embedding``: (B,) -> (B, channels)."""
    half = channels // 2
    exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=values.device) / (half - shift)
    angles = values.float()[:, None] * exponent.exp()[None]
    parts = [angles.cos(), angles.sin()] if flip else [angles.sin(), angles.cos()]
    return torch.cat(parts, dim=-1)


class Attention(nn.Module):
    """diffusers ``Attention``: ``to_q/to_k/to_v`` and ``to_out.0``; keys and values may come from another width."""

    def __init__(self, width: int, heads: int, head_dim: int, context: int | None = None) -> None:
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.to_q = nn.Linear(width, inner, bias=True)
        self.to_k = nn.Linear(context or width, inner, bias=True)
        self.to_v = nn.Linear(context or width, inner, bias=True)
        self.to_out = nn.ModuleList([nn.Linear(inner, width)])

    def forward(self, x: Tensor, context: Tensor | None = None, bias: Tensor | None = None) -> Tensor:
        source = x if context is None else context
        batch = x.shape[0]
        q, k, v = (
            proj(t).view(batch, t.shape[1], self.heads, -1).transpose(1, 2)
            for proj, t in ((self.to_q, x), (self.to_k, source), (self.to_v, source))
        )
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.to_out[0](out.transpose(1, 2).reshape(batch, x.shape[1], -1))


class FeedForward(nn.Module):
    """diffusers ``FeedForward`` with ``gelu-approximate``: ``net.0.proj`` then ``net.2``."""

    def __init__(self, width: int, mult: int) -> None:
        super().__init__()
        self.proj_in = nn.Linear(width, mult * width)
        self.proj_out = nn.Linear(mult * width, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj_out(F.gelu(self.proj_in(x), approximate="tanh"))


class AdaLayerNorm(nn.Module):
    """LayerNorm without affine, scaled and shifted by a linear map of SiLU(time embedding)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, 2 * width)
        self.norm = nn.LayerNorm(width, eps=1e-5, elementwise_affine=False)

    def forward(self, x: Tensor, temb: Tensor) -> Tensor:
        scale, shift = self.linear(F.silu(temb)).chunk(2, dim=-1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class AdapterBlock(nn.Module):
    """A VL self-attention block (LayerNorm pre-norm, self-attention, GELU feed-forward)."""

    def __init__(self, width: int, heads: int, head_dim: int, mult: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-5)
        self.attn1 = Attention(width, heads, head_dim)
        self.norm3 = nn.LayerNorm(width, eps=1e-5)
        self.ff = FeedForward(width, mult)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        x = x + self.attn1(self.norm1(x), bias=bias)
        return x + self.ff(self.norm3(x))


class DiTBlock(nn.Module):
    def __init__(self, spec: Gr00tSpec, cross: bool) -> None:
        super().__init__()
        dit = spec.dit
        self.cross = cross
        self.norm1 = AdaLayerNorm(dit.inner)
        self.attn1 = Attention(dit.inner, dit.heads, dit.head_dim, spec.llm.hidden if cross else None)
        self.norm3 = nn.LayerNorm(dit.inner, eps=1e-5, elementwise_affine=False)
        self.ff = FeedForward(dit.inner, dit.ff_mult)

    def forward(self, x: Tensor, temb: Tensor, features: Tensor, cross_bias: Tensor) -> Tensor:
        normed = self.norm1(x, temb)
        x = x + (self.attn1(normed, features, cross_bias) if self.cross else self.attn1(normed))
        return x + self.ff(self.norm3(x))


class TimestepEncoder(nn.Module):
    def __init__(self, channels: int, width: int) -> None:
        super().__init__()
        self.channels = channels
        self.linear_1 = nn.Linear(channels, width)
        self.linear_2 = nn.Linear(width, width)

    def forward(self, steps: Tensor, dtype: torch.dtype) -> Tensor:
        """The steps' embedding, computed in ``dtype`` (the float parts' dtype; a quantized linear_1 may hold no
        float weight to read it from)."""
        embedded = sinusoid(steps, self.channels, flip=True, shift=1.0).to(dtype)
        return self.linear_2(F.silu(self.linear_1(embedded)))


class DiT(nn.Module):
    def __init__(self, spec: Gr00tSpec) -> None:
        super().__init__()
        dit = spec.dit
        self.timestep_encoder = TimestepEncoder(dit.time_channels, dit.inner)
        self.transformer_blocks = nn.ModuleList(DiTBlock(spec, cross=i % 2 == 0) for i in range(dit.layers))
        self.norm_out = nn.LayerNorm(dit.inner, eps=1e-6, elementwise_affine=False)
        self.proj_out_1 = nn.Linear(dit.inner, 2 * dit.inner)
        self.proj_out_2 = nn.Linear(dit.inner, dit.output_dim)

    def forward(self, x: Tensor, steps: Tensor, features: Tensor, cross_bias: Tensor | list[Tensor]) -> Tensor:
        """``cross_bias``: one mask for every cross-attention block, or one per block (N1.6's alternation)."""
        temb = self.timestep_encoder(steps, x.dtype)
        for index, block in enumerate(self.transformer_blocks):
            x = block(x, temb, features, cross_bias[index] if isinstance(cross_bias, list) else cross_bias)
        shift, scale = self.proj_out_1(F.silu(temb)).chunk(2, dim=-1)
        return self.proj_out_2(self.norm_out(x) * (1 + scale[:, None]) + shift[:, None])


class CategorySpecificLinear(nn.Module):
    """One weight matrix per embodiment; the replica runs slice ``EMBODIMENT``."""

    def __init__(self, categories: int, inputs: int, outputs: int) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.empty(categories, inputs, outputs))
        self.b = nn.Parameter(torch.empty(categories, outputs))

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.W[EMBODIMENT] + self.b[EMBODIMENT]


class CategorySpecificMLP(nn.Module):
    def __init__(self, categories: int, inputs: int, hidden: int, outputs: int) -> None:
        super().__init__()
        self.layer1 = CategorySpecificLinear(categories, inputs, hidden)
        self.layer2 = CategorySpecificLinear(categories, hidden, outputs)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer2(F.relu(self.layer1(x)))


class ActionEncoder(nn.Module):
    """``MultiEmbodimentActionEncoder``: noisy actions and the discretized time → DiT-width tokens."""

    def __init__(self, categories: int, action_dim: int, width: int) -> None:
        super().__init__()
        self.width = width
        self.W1 = CategorySpecificLinear(categories, action_dim, width)
        self.W2 = CategorySpecificLinear(categories, 2 * width, width)
        self.W3 = CategorySpecificLinear(categories, width, width)

    def forward(self, actions: Tensor, steps: Tensor) -> Tensor:
        embedded = self.W1(actions)
        time = sinusoid(steps, self.width, flip=False, shift=0.0).to(actions.dtype)[:, None].expand_as(embedded)
        return self.W3(F.silu(self.W2(torch.cat([embedded, time], dim=-1))))


class Gr00tPolicy(nn.Module):
    def __init__(self, spec: Gr00tSpec) -> None:
        super().__init__()
        self.spec = spec
        head, dit, action = spec.head, spec.dit, spec.action
        self.vision_tower = SiglipVisionTower(spec.vision)
        self.connector = build_connector(spec.vision, spec.llm.hidden)
        self.language_model = TextDecoder(spec.llm)
        self.vlln = nn.LayerNorm(spec.llm.hidden, eps=1e-5)
        adapter = spec.adapter
        self.vl_self_attention = nn.ModuleList(
            AdapterBlock(spec.llm.hidden, adapter.heads, adapter.head_dim, adapter.ff_mult)
            for _ in range(adapter.layers if adapter else 0)
        )
        self.state_encoder = CategorySpecificMLP(head.embodiments, action.state_dim, head.state_hidden, dit.inner)
        self.action_encoder = ActionEncoder(head.embodiments, action.action_dim, dit.inner)
        self.future_tokens = nn.Embedding(head.future_tokens, dit.inner) if head.future_tokens else None
        self.position_embedding = nn.Embedding(dit.max_positions, dit.inner)
        self.model = DiT(spec)
        self.action_decoder = CategorySpecificMLP(
            head.embodiments, dit.output_dim, head.decoder_hidden, action.action_dim
        )

    def embed_images(self, images: Tensor) -> Tensor:
        batch, cameras = images.shape[:2]
        tokens = self.connector(self.vision_tower(images.flatten(0, 1)))
        return tokens.reshape(batch, cameras * tokens.shape[1], tokens.shape[2])

    def prefill(self, obs: Observation, image_tokens: Tensor) -> FeatureCache:
        """Causal Qwen3 over [image ; language] tokens (pre-norm output of the last kept layer), then the adapter."""
        language = self.language_model.embed_tokens(obs.language_tokens).to(image_tokens.dtype)
        h = torch.cat([image_tokens, language], dim=1)
        valid = torch.cat([torch.ones(image_tokens.shape[:2], dtype=torch.bool, device=h.device), obs.language_mask], 1)
        order = torch.arange(h.shape[1], device=h.device).expand(h.shape[0], -1)
        cos, sin = rope_cos_sin(valid.long().cumsum(1) - 1, self.spec.llm.head_dim, self.spec.llm.rope_theta, h.dtype)
        causal = additive_mask(block_mask(order, order, valid), h.dtype)
        post_norm = self.spec.head.vl_features == "post-norm"
        features, _, _ = self.language_model(h, cos, sin, causal, final_norm=post_norm)
        features = self.vlln(features)
        visible = additive_mask(valid[:, None, :].expand(-1, h.shape[1], -1), h.dtype)
        for block in self.vl_self_attention:
            features = block(features, visible)
        image = None
        if self.spec.dit.alternate_text_every is not None:
            image = torch.zeros_like(valid)
            image[:, : image_tokens.shape[1]] = True
        return FeatureCache(features=features, valid=valid, state=obs.state, image=image)

    def prefix(self, obs: Observation) -> FeatureCache:
        return self.prefill(obs, self.embed_images(obs.images))

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: FeatureCache) -> Tensor:
        batch, chunk = x_t.shape[:2]
        steps = ((1.0 - t.float()) * self.spec.dit.timestep_buckets).long()
        state = self.state_encoder(cache.state.to(x_t.dtype))[:, None]
        positions = self.position_embedding.weight[:chunk][None]
        actions = self.action_encoder(x_t, steps) + positions
        parts = [state, actions]
        if self.future_tokens is not None:
            parts.insert(1, self.future_tokens.weight[None].expand(batch, -1, -1).to(x_t.dtype))
        tokens = torch.cat(parts, dim=1)
        out = self.model(tokens, steps, cache.features, self.cross_biases(cache, tokens.shape[1], x_t.dtype))
        return -self.action_decoder(out[:, -chunk:])

    def cross_biases(self, cache: FeatureCache, suffix: int, dtype: torch.dtype) -> Tensor | list[Tensor]:
        """The cross-attention masks: every valid VL token, or (N1.6) per block the text or the image tokens."""
        every = self.spec.dit.alternate_text_every
        if every is None or cache.image is None:
            return additive_mask(cache.valid[:, None, :].expand(-1, suffix, -1), dtype)
        text = additive_mask((cache.valid & ~cache.image)[:, None, :].expand(-1, suffix, -1), dtype)
        image = additive_mask((cache.valid & cache.image)[:, None, :].expand(-1, suffix, -1), dtype)
        return [text if index % (2 * every) == 0 else image for index in range(self.spec.dit.layers)]
