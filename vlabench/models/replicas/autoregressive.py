"""Token-decoding VLAs: OpenVLA (7 action tokens through Llama-2), OpenVLA-OFT (one parallel pass over the chunk,
L1-regression MLP head) and π0-FAST (FAST tokens through PaliGemma's Gemma).

Sources: openvla/openvla ``prismatic/models/{vlas/openvla.py, backbones/vision/dinosiglip_vit.py, projectors.py}``;
moojink/openvla-oft ``prismatic/models/action_heads.py`` (L1RegressionActionHead, MLPResNet),
``prismatic/models/projectors.py`` (ProprioProjector); Physical-Intelligence/openpi
``src/openpi/models/pi0_fast.py``.

Phase 1 (``embed_images`` + ``prefill``) writes the prompt's K/V into static buffers that leave room for the decoded
tokens and returns the logits of the first action token; phase 2 is ``decode_step`` (one token through the LLM
against the buffers, returning its logits and K/V, which ``vlabench.measure.action_loops.GreedyDecoder`` writes
back) or, for OFT, one ``denoise_step`` that decodes the whole chunk in parallel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlabench.models.replicas.caches import BatchedCache
from vlabench.models.replicas.decoder import TextDecoder
from vlabench.models.replicas.flow_vla import Observation, PrefixCache
from vlabench.models.replicas.layers import PointwiseMLP, additive_mask, block_mask, rope_cos_sin
from vlabench.models.replicas.vision import SiglipVisionTower, build_connector
from vlabench.models.specs import OpenVLASpec, Pi0FastSpec, ViTSpec


@dataclass
class DecodeCache(BatchedCache):
    """Static K/V buffers of the prompt plus one slot per decode step, their validity, and the first token's
    logits over the action-token range (from the prompt's last valid position)."""

    LAYER_MAJOR = ("keys", "values")

    keys: Tensor  # (layers, B, kv_heads, P + steps, head_dim)
    values: Tensor
    valid: Tensor  # (B, P + steps) bool; the decode slots turn valid as tokens are written
    logits: Tensor  # (B, action_vocab)


class TimmAttention(nn.Module):
    """timm ViT attention: one fused ``qkv`` projection with bias."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, seq, width))


class LayerScale(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.scale_factor = nn.Parameter(torch.ones(hidden))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.scale_factor


class TimmBlock(nn.Module):
    def __init__(self, spec: ViTSpec) -> None:
        super().__init__()
        dinov2 = spec.kind == "dinov2"
        self.norm1 = nn.LayerNorm(spec.hidden, eps=spec.layer_norm_eps)
        self.attn = TimmAttention(spec.hidden, spec.heads)
        self.ls1 = LayerScale(spec.hidden) if dinov2 else nn.Identity()
        self.norm2 = nn.LayerNorm(spec.hidden, eps=spec.layer_norm_eps)
        self.mlp = PointwiseMLP(spec.hidden, spec.intermediate, "gelu" if dinov2 else "gelu_tanh")
        self.ls2 = LayerScale(spec.hidden) if dinov2 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class PatchEmbed(nn.Module):
    def __init__(self, spec: ViTSpec) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, spec.hidden, spec.patch_size, stride=spec.patch_size)


class TimmViT(nn.Module):
    """A timm ViT featurizer read at block ``used_layers`` (Prismatic: the second-to-last), patch tokens only.
    The blocks after it and the final norm are held, as in the checkpoint, but not run."""

    def __init__(self, spec: ViTSpec) -> None:
        super().__init__()
        self.spec = spec
        self.patch_embed = PatchEmbed(spec)
        prefix = 1 if spec.kind == "dinov2" else 0
        if prefix:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, spec.hidden))
            self.reg_token = nn.Parameter(torch.zeros(1, spec.registers, spec.hidden))
        self.pos_embed = nn.Parameter(torch.zeros(1, spec.patches + prefix, spec.hidden))
        self.blocks = nn.ModuleList(TimmBlock(spec) for _ in range(spec.layers))
        self.norm = nn.LayerNorm(spec.hidden, eps=spec.layer_norm_eps)

    def forward(self, pixels: Tensor) -> Tensor:
        x = self.patch_embed.proj(pixels).flatten(2).transpose(1, 2)
        extra = 0
        if self.spec.kind == "dinov2":
            batch = x.shape[0]
            x = torch.cat([self.cls_token.expand(batch, -1, -1), x], dim=1) + self.pos_embed
            x = torch.cat([x[:, :1], self.reg_token.expand(batch, -1, -1), x[:, 1:]], dim=1)
            extra = 1 + self.spec.registers
        else:
            x = x + self.pos_embed
        for block in self.blocks[: self.spec.used_layers]:
            x = block(x)
        return x[:, extra:]


class DinoSigLIPBackbone(nn.Module):
    def __init__(self, spec: OpenVLASpec) -> None:
        super().__init__()
        dino, siglip = sorted(spec.towers, key=lambda tower: tower.kind)
        self.featurizer = TimmViT(dino)
        self.fused_featurizer = TimmViT(siglip)

    def forward(self, pixels: Tensor) -> Tensor:
        return torch.cat([self.featurizer(pixels), self.fused_featurizer(pixels)], dim=2)


class FusedMLPProjector(nn.Module):
    """Prismatic ``fused-gelu-mlp``: fused vision width → 4× → LLM width → LLM width."""

    def __init__(self, vision: int, llm: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(vision, 4 * vision)
        self.fc2 = nn.Linear(4 * vision, llm)
        self.fc3 = nn.Linear(llm, llm)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


class ProprioProjector(nn.Module):
    def __init__(self, state_dim: int, llm: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(state_dim, llm)
        self.fc2 = nn.Linear(llm, llm)

    def forward(self, state: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(state)))


class MLPResNetBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ffn = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU())

    def forward(self, x: Tensor) -> Tensor:
        return x + self.ffn(x)


class L1RegressionActionHead(nn.Module):
    """OFT's head: the chunk's action-token hidden states, one row of ``action_dim`` tokens per action."""

    def __init__(self, llm: int, action_dim: int, blocks: int) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(llm * action_dim)
        self.fc1 = nn.Linear(llm * action_dim, llm)
        self.mlp_resnet_blocks = nn.ModuleList(MLPResNetBlock(llm) for _ in range(blocks))
        self.layer_norm2 = nn.LayerNorm(llm)
        self.fc2 = nn.Linear(llm, action_dim)

    def forward(self, hidden: Tensor) -> Tensor:
        x = F.relu(self.fc1(self.layer_norm1(hidden)))
        for block in self.mlp_resnet_blocks:
            x = block(x)
        return self.fc2(self.layer_norm2(x))


class TokenDecodingVLA(nn.Module):
    """What OpenVLA and π0-FAST share: a prompt prefill into static buffers and a one-token decode step."""

    language_model: TextDecoder
    embedding_scale: float
    prefix_lm: bool  # True: the prompt attends bidirectionally (PaliGemma); False: causally (Llama)
    action_vocab: tuple[int, int]  # [first, end) ids of the action tokens

    def embed_images(self, images: Tensor) -> Tensor:
        raise NotImplementedError

    def _prompt(self, obs: Observation, image_tokens: Tensor) -> tuple[Tensor, Tensor]:
        language = self.language_model.embed_tokens(obs.language_tokens) * self.embedding_scale
        valid = torch.ones(image_tokens.shape[:2], dtype=torch.bool, device=image_tokens.device)
        return torch.cat([image_tokens, language.to(image_tokens.dtype)], 1), torch.cat([valid, obs.language_mask], 1)

    def _prompt_mask(self, valid: Tensor) -> Tensor:
        length = valid.shape[1]
        blocks = torch.zeros(length, dtype=torch.long, device=valid.device) if self.prefix_lm else None
        if blocks is None:
            blocks = torch.arange(length, device=valid.device)
        blocks = blocks.expand(valid.shape[0], -1)
        return block_mask(blocks, blocks, valid)

    def _action_logits(self, hidden: Tensor) -> Tensor:
        """Full-vocabulary logits (as the model computes them), then the action-token range."""
        head = self.language_model.lm_head
        weight = head.weight if head is not None else self.language_model.embed_tokens.weight
        first, end = self.action_vocab
        return (hidden @ weight.t())[..., first:end]

    def prefill(self, obs: Observation, image_tokens: Tensor) -> DecodeCache:
        h, valid = self._prompt(obs, image_tokens)
        llm = self.language_model
        positions = valid.long().cumsum(1) - 1
        cos, sin = rope_cos_sin(positions, self.spec.llm.head_dim, self.spec.llm.rope_theta, h.dtype)
        hidden, keys, values = llm(h, cos, sin, additive_mask(self._prompt_mask(valid), h.dtype))
        last = (valid.long().sum(1) - 1)[:, None, None].expand(-1, 1, hidden.shape[-1])
        logits = self._action_logits(hidden.gather(1, last)[:, 0])
        slots = self.spec.action.steps
        keys, values = torch.stack(keys), torch.stack(values)
        room = (0, 0, 0, slots)
        closed = torch.zeros(valid.shape[0], slots, dtype=torch.bool, device=valid.device)
        return DecodeCache(
            keys=F.pad(keys, room), values=F.pad(values, room), valid=torch.cat([valid, closed], 1), logits=logits
        )

    def decode_step(self, token: Tensor, cache: DecodeCache) -> tuple[Tensor, Tensor, Tensor]:
        """One token (B, 1) through the LLM against the buffers -> (action logits, its keys, its values)."""
        h = self.language_model.embed_tokens(token) * self.embedding_scale
        dtype = cache.keys.dtype
        position = cache.valid.long().sum(1, keepdim=True)
        cos, sin = rope_cos_sin(position, self.spec.llm.head_dim, self.spec.llm.rope_theta, dtype)
        allowed = torch.cat([cache.valid, torch.ones_like(cache.valid[:, :1])], 1)[:, None, :]
        hidden, keys, values = self.language_model(
            h.to(dtype), cos, sin, additive_mask(allowed, dtype), (cache.keys, cache.values)
        )
        return self._action_logits(hidden[:, -1]), torch.stack(keys), torch.stack(values)

    def prefix(self, obs: Observation) -> DecodeCache:
        return self.prefill(obs, self.embed_images(obs.images))


class OpenVLA(TokenDecodingVLA):
    """OpenVLA / OpenVLA-OFT replica (Prismatic naming: ``vision_backbone``, ``projector``, ``language_model``)."""

    embedding_scale = 1.0
    prefix_lm = False

    def __init__(self, spec: OpenVLASpec) -> None:
        super().__init__()
        self.spec = spec
        self.vision_backbone = DinoSigLIPBackbone(spec)
        self.projector = FusedMLPProjector(spec.fused_width, spec.llm.hidden)
        self.language_model = TextDecoder(spec.llm)
        vocab = spec.llm.vocab
        self.action_vocab = (vocab - spec.action.bins, vocab)
        if spec.parallel:
            if spec.action.state_dim:
                self.proprio_projector = ProprioProjector(spec.action.state_dim, spec.llm.hidden)
            self.action_head = L1RegressionActionHead(spec.llm.hidden, spec.action.action_dim, spec.action.head_blocks)

    def embed_images(self, images: Tensor) -> Tensor:
        batch, cameras = images.shape[:2]
        tokens = self.projector(self.vision_backbone(images.flatten(0, 1)))
        return tokens.reshape(batch, cameras * tokens.shape[1], tokens.shape[2])

    def _prompt(self, obs: Observation, image_tokens: Tensor) -> tuple[Tensor, Tensor]:
        h, valid = super()._prompt(obs, image_tokens)
        if self.spec.parallel and self.spec.action.state_dim:
            h = torch.cat([h, self.proprio_projector(obs.state)[:, None].to(h.dtype)], 1)
            valid = torch.cat([valid, torch.ones_like(valid[:, :1])], 1)
        return h, valid

    def prefill(self, obs: Observation, image_tokens: Tensor) -> DecodeCache | PrefixCache:
        if not self.spec.parallel:
            return super().prefill(obs, image_tokens)
        h, valid = self._prompt(obs, image_tokens)
        positions = valid.long().cumsum(1) - 1
        cos, sin = rope_cos_sin(positions, self.spec.llm.head_dim, self.spec.llm.rope_theta, h.dtype)
        _, keys, values = self.language_model(h, cos, sin, additive_mask(self._prompt_mask(valid), h.dtype))
        return PrefixCache(keys=torch.stack(keys), values=torch.stack(values), valid=valid, state=obs.state)

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        """OFT's parallel decoding: chunk × action_dim empty action embeddings attend bidirectionally to each other
        and to the prompt; the MLP head regresses the chunk from their final hidden states. ``x_t``/``t`` unused."""
        batch, chunk, action_dim = x_t.shape
        dtype = cache.keys.dtype
        tokens = chunk * action_dim
        h = torch.zeros(batch, tokens, self.spec.llm.hidden, dtype=dtype, device=x_t.device)
        offset = cache.valid.long().sum(1, keepdim=True)
        positions = offset + torch.arange(tokens, device=x_t.device)[None]
        cos, sin = rope_cos_sin(positions, self.spec.llm.head_dim, self.spec.llm.rope_theta, dtype)
        allowed = torch.cat([cache.valid, torch.ones(batch, tokens, dtype=torch.bool, device=x_t.device)], 1)
        bias = additive_mask(allowed[:, None, :].expand(batch, tokens, -1), dtype)
        hidden, _, _ = self.language_model(h, cos, sin, bias, (cache.keys, cache.values))
        return self.action_head(hidden.reshape(batch, chunk, action_dim * hidden.shape[-1]))


class Pi0Fast(TokenDecodingVLA):
    """π0-FAST replica: PaliGemma (SigLIP So400m, linear projector, Gemma-2B with its tied embedding as LM head)."""

    prefix_lm = True

    def __init__(self, spec: Pi0FastSpec) -> None:
        super().__init__()
        self.spec = spec
        self.vision_tower = SiglipVisionTower(spec.vision)
        self.connector = build_connector(spec.vision, spec.llm.hidden)
        self.language_model = TextDecoder(spec.llm)
        self.embedding_scale = math.sqrt(spec.llm.hidden)
        end = spec.llm.vocab - spec.action.skip_tokens
        self.action_vocab = (end - spec.action.fast_vocab, end)

    def embed_images(self, images: Tensor) -> Tensor:
        batch, cameras = images.shape[:2]
        tokens = self.connector(self.vision_tower(images.flatten(0, 1)))
        return tokens.reshape(batch, cameras * tokens.shape[1], tokens.shape[2])
