"""Flow-matching VLA replicas (SmolVLA, π0, π0.5) with the two-phase API.

One module serves the whole family; the spec decides where the state goes, how time conditions the expert and
how the expert reads the prefix. Phase 1 (``embed_images`` + ``prefill``) fills a per-layer K/V cache once per
observation; phase 2 is ``denoise_step``, called by the Euler action loop once per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlabench.models.replicas.caches import BatchedCache
from vlabench.models.replicas.decoder import TextDecoder, mlp_activation
from vlabench.models.replicas.layers import (
    AdaptiveRMSNorm,
    GatedMLP,
    RMSNorm,
    RotaryTable,
    SelfAttentionProjections,
    additive_mask,
    apply_rope,
    block_mask,
    merge_heads,
    rope_cos_sin,
    sinusoidal_time_embedding,
    split_heads,
)
from vlabench.models.replicas.vision import SiglipVisionTower, build_connector
from vlabench.models.specs import ExpertSpec, ModelSpec


@dataclass
class Observation:
    """One synthetic or real observation batch, already preprocessed to model-ready tensors."""

    images: Tensor  # (B, cameras, 3, H, W), values in [-1, 1]
    language_tokens: Tensor  # (B, L) int64, padded to the spec's length
    language_mask: Tensor  # (B, L) bool, False on padding
    state: Tensor  # (B, state_dim)


@dataclass
class ExpertKV:
    """Expert-side K/V prepared once per inference (``kernels.expert_fusion``): the cross-attention layers'
    projections of the prefix K/V, and static [prefix ; suffix] buffers whose prefix part is filled once."""

    cross: dict[int, tuple[Tensor, Tensor]]  # layer -> projected (B, kv_heads, P, head_dim) keys, values
    joint_keys: Tensor | None  # (layers, B, kv_heads, P + S, head_dim), suffix part rewritten every step
    joint_values: Tensor | None


@dataclass
class PrefixCache(BatchedCache):
    """Everything the action expert needs from phase 1: post-RoPE K/V of every kept LLM layer."""

    LAYER_MAJOR = ("keys", "values")

    keys: Tensor  # (layers, B, kv_heads, P, head_dim)
    values: Tensor  # (layers, B, kv_heads, P, head_dim)
    valid: Tensor  # (B, P) bool, False on padded language tokens
    state: Tensor  # (B, state_dim): π0 reads it as a suffix token in every step
    expert_kv: ExpertKV | None = None


@dataclass
class ExpertInputs:
    """Per-step tensors shared by every expert layer."""

    rope: tuple[Tensor, Tensor]
    bias: Tensor  # suffix queries over [prefix ; suffix] keys
    cross_rope: tuple[Tensor, Tensor]
    cross_bias: Tensor  # suffix queries over prefix keys only
    cond: Tensor | None  # adaRMS conditioning (π0.5)


class ExpertLayer(nn.Module):
    """One action-expert layer: joint attention over [prefix K/V ; suffix K/V], or cross-attention to the
    prefix K/V re-projected by the expert's own k/v weights (SmolVLA's odd layers)."""

    def __init__(self, spec: ExpertSpec, cross: bool, prefix_kv_width: int) -> None:
        super().__init__()
        self.cross = cross
        self.adaptive = spec.time_conditioning == "adarms"
        kv_in = prefix_kv_width if cross else None
        self.self_attn = SelfAttentionProjections(spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, kv_in)
        self.mlp = GatedMLP(spec.hidden, spec.intermediate, mlp_activation(spec))
        gemma = spec.style == "gemma"
        if self.adaptive:
            self.input_layernorm = AdaptiveRMSNorm(spec.hidden, spec.hidden, spec.rms_eps)
            self.post_attention_layernorm = AdaptiveRMSNorm(spec.hidden, spec.hidden, spec.rms_eps)
        else:
            self.input_layernorm = RMSNorm(spec.hidden, spec.rms_eps, gemma_offset=gemma)
            self.post_attention_layernorm = RMSNorm(spec.hidden, spec.rms_eps, gemma_offset=gemma)

    def _norm(self, norm: nn.Module, h: Tensor, cond: Tensor | None) -> tuple[Tensor, Tensor | None]:
        return norm(h, cond) if self.adaptive else (norm(h), None)

    def project_prefix(self, prefix_k: Tensor, prefix_v: Tensor) -> tuple[Tensor, Tensor]:
        """A cross-attention layer's own K/V of the prefix (the same for every denoising step)."""
        attn = self.self_attn
        k = split_heads(attn.k_proj(merge_heads(prefix_k)), attn.kv_heads)
        return k, split_heads(attn.v_proj(merge_heads(prefix_v)), attn.kv_heads)

    def forward(
        self,
        h: Tensor,
        prefix_k: Tensor,
        prefix_v: Tensor,
        inputs: ExpertInputs,
        projected: tuple[Tensor, Tensor] | None = None,
        joint: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """``projected``: this cross layer's hoisted prefix K/V; ``joint``: static [prefix ; suffix] buffers whose
        suffix part this step overwrites (both from ``ExpertKV``; the results are identical to the plain path)."""
        attn = self.self_attn
        x, gate = self._norm(self.input_layernorm, h, inputs.cond)
        if self.cross:
            cos, sin = inputs.cross_rope
            q = apply_rope(split_heads(attn.q_proj(x), attn.heads), cos, sin)
            k, v = projected if projected is not None else self.project_prefix(prefix_k, prefix_v)
            bias = inputs.cross_bias
        else:
            cos, sin = inputs.rope
            q, new_k, new_v = attn.project(x)
            q = apply_rope(split_heads(q, attn.heads), cos, sin)
            new_k = apply_rope(split_heads(new_k, attn.kv_heads), cos, sin)
            new_v = split_heads(new_v, attn.kv_heads)
            if joint is not None:
                k, v = joint
                k[:, :, prefix_k.shape[2] :] = new_k
                v[:, :, prefix_v.shape[2] :] = new_v
            else:
                k = torch.cat([prefix_k, new_k], dim=2)
                v = torch.cat([prefix_v, new_v], dim=2)
            bias = inputs.bias
        out = attn.o_proj(merge_heads(attn.attend(q, k, v, bias)))
        h = h + (out if gate is None else out * gate)
        x, gate = self._norm(self.post_attention_layernorm, h, inputs.cond)
        out = self.mlp(x)
        return h + (out if gate is None else out * gate)


class ActionExpert(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        expert = spec.expert
        kv_width = spec.llm.kv_heads * spec.llm.head_dim
        self.layers = nn.ModuleList(
            ExpertLayer(expert, cross=_is_cross_layer(expert, i), prefix_kv_width=kv_width)
            for i in range(expert.layers)
        )
        if expert.time_conditioning == "adarms":
            self.norm = AdaptiveRMSNorm(expert.hidden, expert.hidden, expert.rms_eps)
        else:
            self.norm = RMSNorm(expert.hidden, expert.rms_eps, gemma_offset=expert.style == "gemma")


def _is_cross_layer(expert: ExpertSpec, index: int) -> bool:
    return expert.attention == "alternating_cross" and index % expert.self_attn_every != 0


class FlowMatchingVLA(nn.Module):
    """SmolVLA / π0 / π0.5 replica: SigLIP + connector + LLM prefix, flow-matching action expert."""

    # lerobot checkpoint keys: smolvla (SmolVLMWithExpertModel) and pi0/pi05 (PaliGemmaWithExpertModel, in both
    # the transformers ≥ 4.52 layout ``paligemma.model.*`` and the older ``paligemma.*`` one).
    LEROBOT_RENAMES = (
        ("model.vlm_with_expert.vlm.model.vision_model.", "vision_tower."),
        ("model.vlm_with_expert.vlm.model.connector.", "connector."),
        ("model.vlm_with_expert.vlm.model.text_model.", "language_model."),
        ("model.vlm_with_expert.vlm.lm_head.", "language_model.lm_head."),
        ("model.vlm_with_expert.lm_expert.", "expert."),
        ("model.paligemma_with_expert.paligemma.model.vision_tower.vision_model.", "vision_tower."),
        ("model.paligemma_with_expert.paligemma.model.multi_modal_projector.", "connector."),
        ("model.paligemma_with_expert.paligemma.model.language_model.", "language_model."),
        ("model.paligemma_with_expert.paligemma.vision_tower.vision_model.", "vision_tower."),
        ("model.paligemma_with_expert.paligemma.multi_modal_projector.", "connector."),
        ("model.paligemma_with_expert.paligemma.language_model.model.", "language_model."),
        ("model.paligemma_with_expert.gemma_expert.model.", "expert."),
        ("model.", ""),
    )
    LEROBOT_IGNORED = (
        "model.paligemma_with_expert.gemma_expert.lm_head.",  # the expert's unused LM head (it emits no tokens)
        "model.paligemma_with_expert.gemma_expert.model.embed_tokens.",  # unused; lerobot sets both experts'
        "model.vlm_with_expert.lm_expert.embed_tokens.",  # embed_tokens to None, so its files lack them
        "normalize_inputs.",  # normalization statistics: lerobot < 0.4 kept them in the model file
        "normalize_targets.",
        "unnormalize_outputs.",
    )
    # PaliGemma ties its input embedding to its LM head; lerobot's save_pretrained writes the pair once, under the
    # alphabetically first name, ``lm_head.weight`` (the real lerobot/pi0_base and pi05_base files hold no
    # ``embed_tokens``: huggingface/lerobot#2151, #2307). SmolVLM's are untied: both are in the file.
    LEROBOT_TIED = (
        ("language_model.embed_tokens.weight", "model.paligemma_with_expert.paligemma.lm_head.weight"),
        ("language_model.embed_tokens.weight", "model.paligemma_with_expert.paligemma.language_model.lm_head.weight"),
    )

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        llm, expert, action = spec.llm, spec.expert, spec.action
        self.vision_tower = SiglipVisionTower(spec.vision)
        self.connector = build_connector(spec.vision, llm.hidden)
        self.language_model = TextDecoder(llm)
        self.expert = ActionExpert(spec)
        self.expert_rope = RotaryTable(expert.head_dim, llm.rope_theta)  # the suffix's positions, every step
        self.action_in_proj = nn.Linear(action.action_dim, expert.hidden)
        self.action_out_proj = nn.Linear(expert.hidden, action.action_dim)
        if action.state_placement == "prefix_token":
            self.state_proj = nn.Linear(action.state_dim, llm.hidden)
        elif action.state_placement == "suffix_token":
            self.state_proj = nn.Linear(action.state_dim, expert.hidden)
        if expert.time_conditioning == "concat_mlp":
            self.action_time_mlp_in = nn.Linear(2 * expert.hidden, expert.hidden)
            self.action_time_mlp_out = nn.Linear(expert.hidden, expert.hidden)
        else:
            self.time_mlp_in = nn.Linear(expert.hidden, expert.hidden)
            self.time_mlp_out = nn.Linear(expert.hidden, expert.hidden)

    # ---- phase 1: prefix -------------------------------------------------------------------------------

    def embed_images(self, images: Tensor) -> Tensor:
        """Vision phase: (B, cameras, 3, H, W) -> image tokens (B, cameras * tokens_per_camera, llm_hidden)."""
        batch, cameras = images.shape[:2]
        tokens = self.connector(self.vision_tower(images.flatten(0, 1)))
        tokens = tokens.reshape(batch, cameras * tokens.shape[1], tokens.shape[2])
        if self.spec.vision.scale_embeddings:
            tokens = tokens * math.sqrt(tokens.shape[-1])
        return tokens

    def prefill(self, obs: Observation, image_tokens: Tensor) -> PrefixCache:
        """Prefill phase: image + language (+ state) tokens through the kept LLM layers -> K/V cache."""
        batch = image_tokens.shape[0]
        hidden = self.spec.llm.hidden
        language = self.language_model.embed_tokens(obs.language_tokens) * math.sqrt(hidden)
        parts = [image_tokens, language.to(image_tokens.dtype)]
        device = image_tokens.device
        valid = [torch.ones(image_tokens.shape[:2], dtype=torch.bool, device=device), obs.language_mask]
        blocks = [torch.zeros(image_tokens.shape[1] + language.shape[1], dtype=torch.long, device=device)]
        if self.spec.action.state_placement == "prefix_token":
            parts.append(self.state_proj(obs.state)[:, None])
            valid.append(torch.ones(batch, 1, dtype=torch.bool, device=device))
            blocks.append(torch.ones(1, dtype=torch.long, device=device))
        h = torch.cat(parts, dim=1)
        valid_mask = torch.cat(valid, dim=1)
        block_ids = torch.cat(blocks).expand(batch, -1)
        positions = valid_mask.long().cumsum(1) - 1
        cos, sin = rope_cos_sin(positions, self.spec.llm.head_dim, self.spec.llm.rope_theta, h.dtype)
        bias = additive_mask(block_mask(block_ids, block_ids, valid_mask), h.dtype)
        _, keys, values = self.language_model(h, cos, sin, bias)
        return PrefixCache(keys=torch.stack(keys), values=torch.stack(values), valid=valid_mask, state=obs.state)

    def prefix(self, obs: Observation) -> PrefixCache:
        return self.prefill(obs, self.embed_images(obs.images))

    # ---- phase 2: one denoising step ---------------------------------------------------------------------

    def _embed_suffix(self, x_t: Tensor, t: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """Suffix tokens, their block ids and the adaRMS condition."""
        action = self.spec.action
        width = self.spec.expert.hidden
        time_emb = sinusoidal_time_embedding(t, width, action.time_min_period, action.time_max_period).to(x_t.dtype)
        tokens = self.action_in_proj(x_t)
        cond = None
        if self.spec.expert.time_conditioning == "concat_mlp":
            mixed = torch.cat([tokens, time_emb[:, None].expand_as(tokens)], dim=-1)
            tokens = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(mixed)))
        else:
            cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(time_emb))))
        if action.action_attention == "causal":
            blocks = torch.arange(1, tokens.shape[1] + 1, device=x_t.device)
        else:
            blocks = torch.ones(tokens.shape[1], dtype=torch.long, device=x_t.device)
        if state is not None:
            tokens = torch.cat([self.state_proj(state)[:, None].to(tokens.dtype), tokens], dim=1)
            blocks = torch.cat([blocks[:1], blocks + 1])
        return tokens, blocks, cond

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        """Velocity field v(x_t, t | prefix) for the noisy action chunk x_t (B, chunk, action_dim)."""
        with_state = cache.state if self.spec.action.state_placement == "suffix_token" else None
        h, suffix_blocks, cond = self._embed_suffix(x_t, t, with_state)
        batch, suffix_len = h.shape[:2]
        dtype = h.dtype
        prefix_valid = cache.valid
        suffix_blocks = suffix_blocks.expand(batch, -1)
        suffix_valid = torch.ones(batch, suffix_len, dtype=torch.bool, device=h.device)
        to_prefix = prefix_valid[:, None, :].expand(batch, suffix_len, -1)
        to_suffix = block_mask(suffix_blocks, suffix_blocks, suffix_valid)
        offset = prefix_valid.long().sum(1, keepdim=True)
        steps = torch.arange(suffix_len, device=h.device)[None].expand(batch, -1)
        inputs = ExpertInputs(
            rope=self.expert_rope(offset + steps, prefix_valid.shape[1] + suffix_len, dtype),
            bias=additive_mask(torch.cat([to_prefix, to_suffix], dim=2), dtype),
            cross_rope=self.expert_rope(steps, suffix_len, dtype),
            cross_bias=additive_mask(to_prefix, dtype),
            cond=cond,
        )
        fused = cache.expert_kv
        for index, layer in enumerate(self.expert.layers):
            if fused is None:
                h = layer(h, cache.keys[index], cache.values[index], inputs)
                continue
            joint = None
            if fused.joint_keys is not None and fused.joint_values is not None:
                joint = (fused.joint_keys[index], fused.joint_values[index])
            h = layer(h, cache.keys[index], cache.values[index], inputs, fused.cross.get(index), joint)
        h = self.expert.norm(h, cond)[0] if cond is not None else self.expert.norm(h)
        return self.action_out_proj(h[:, -x_t.shape[1] :])  # the workload's chunk, not the spec's default
