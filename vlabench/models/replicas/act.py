"""ACT (Action Chunking Transformer) replica with the two-phase API, mirroring lerobot's state dict.

Source: huggingface/lerobot ``src/lerobot/policies/act/modeling_act.py`` (read at v0.4.1, commit 90661ad) and
``configuration_act.py``. Module and parameter names are lerobot's ``ACT`` module's, so a lerobot
``model.safetensors`` loads after stripping the ``model.`` prefix (``LEROBOT_RENAMES``).

Inputs: ``obs.images`` is (B, cameras * frames, 3, H, W), frame-major (all cameras of frame 0, then frame 1, ...);
ACT reads one frame, so it is (B, cameras, 3, H, W). ``obs.state`` is (B, frames * state_dim) = (B, state_dim).
``obs.language_tokens`` and ``obs.language_mask`` are ignored: ACT reads no language.

Phases:
- ``embed_images``: ResNet-18 ``layer4`` features (frozen BatchNorm) → ``encoder_img_feat_input_proj`` 1×1 conv →
  image tokens (B, cameras * h * w, hidden), camera by camera, row-major over the feature map;
- ``prefill``: the post-norm transformer encoder over [latent token (zero latent, the CVAE encoder is skipped at
  inference), state token, image tokens] with lerobot's positional embeddings → :class:`ActMemory`;
- ``denoise_step``: the decoder (``chunk`` zero queries + ``decoder_pos_embed``, cross-attending to the memory) and
  ``action_head`` → the action chunk in one pass. ``x_t`` and ``t`` are ignored (``action_loop == "single_pass"``).

The CVAE encoder (``vae_encoder*``) is held for the parameter count and the checkpoint layout but never run.
Positional tables are computed from static shapes at call time (no buffers): lerobot's only persistent table,
``vae_encoder_pos_enc``, belongs to the unused CVAE encoder and is listed in ``LEROBOT_IGNORED``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlabench.models.replicas.caches import BatchedCache
from vlabench.models.replicas.flow_vla import Observation
from vlabench.models.replicas.resnet import resnet_trunk
from vlabench.models.specs_visuomotor import ActSpec, ActTransformerSpec

SINUSOID_TEMPERATURE = 10000.0
POSITION_EPS = 1e-6  # lerobot ACTSinusoidalPositionEmbedding2d: index / (last index + eps) * 2π


@dataclass
class ActMemory(BatchedCache):
    """What the decoder reads from the prefix: the encoder output and the positional embedding of its keys."""

    memory: Tensor  # (B, S, hidden): encoder output over [latent, state, image tokens]
    memory_pos: Tensor  # (B, S, hidden): positional embedding added to the cross-attention keys


def sinusoidal_2d(height: int, width: int, hidden: int, device: torch.device) -> Tensor:
    """lerobot's ``ACTSinusoidalPositionEmbedding2d`` for an (height, width) map as (height * width, hidden), fp32.

    Positions are 1..n scaled to (0, 2π]; each half of the channels (y first, then x) interleaves sin and cos.
    """
    dim = hidden // 2
    inverse_frequency = SINUSOID_TEMPERATURE ** (2 * (torch.arange(dim, device=device) // 2) / dim)

    def axis(length: int) -> Tensor:
        positions = (
            torch.arange(1, length + 1, dtype=torch.float32, device=device) / (length + POSITION_EPS) * (2 * math.pi)
        )
        angles = positions[:, None] / inverse_frequency  # (length, dim)
        return torch.stack((angles[:, 0::2].sin(), angles[:, 1::2].cos()), dim=-1).flatten(1)

    y = axis(height)[:, None, :].expand(height, width, dim)
    x = axis(width)[None, :, :].expand(height, width, dim)
    return torch.cat((y, x), dim=-1).reshape(height * width, hidden)


class ACTEncoderLayer(nn.Module):
    """Post-norm encoder layer (lerobot ``pre_norm=False``), sequence-first like lerobot's."""

    def __init__(self, config: ActTransformerSpec) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(config.hidden, config.heads)
        self.linear1 = nn.Linear(config.hidden, config.feedforward)
        self.linear2 = nn.Linear(config.feedforward, config.hidden)
        self.norm1 = nn.LayerNorm(config.hidden)
        self.norm2 = nn.LayerNorm(config.hidden)

    def forward(self, x: Tensor, pos_embed: Tensor) -> Tensor:
        q = k = x + pos_embed
        x = self.norm1(x + self.self_attn(q, k, value=x, need_weights=False)[0])
        return self.norm2(x + self.linear2(F.relu(self.linear1(x))))


class ACTEncoder(nn.Module):
    """A stack of encoder layers; lerobot's final norm is ``nn.Identity`` when ``pre_norm=False``."""

    def __init__(self, config: ActTransformerSpec, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ACTEncoderLayer(config) for _ in range(layers))

    def forward(self, x: Tensor, pos_embed: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, pos_embed)
        return x


class ACTDecoderLayer(nn.Module):
    """Post-norm decoder layer: self-attention over the queries, cross-attention to the encoder memory, ReLU MLP."""

    def __init__(self, config: ActTransformerSpec) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(config.hidden, config.heads)
        self.multihead_attn = nn.MultiheadAttention(config.hidden, config.heads)
        self.linear1 = nn.Linear(config.hidden, config.feedforward)
        self.linear2 = nn.Linear(config.feedforward, config.hidden)
        self.norm1 = nn.LayerNorm(config.hidden)
        self.norm2 = nn.LayerNorm(config.hidden)
        self.norm3 = nn.LayerNorm(config.hidden)

    def forward(self, x: Tensor, memory: Tensor, query_pos: Tensor, memory_pos: Tensor) -> Tensor:
        q = k = x + query_pos
        x = self.norm1(x + self.self_attn(q, k, value=x, need_weights=False)[0])
        attended = self.multihead_attn(query=x + query_pos, key=memory + memory_pos, value=memory, need_weights=False)[
            0
        ]
        x = self.norm2(x + attended)
        return self.norm3(x + self.linear2(F.relu(self.linear1(x))))


class ACTDecoder(nn.Module):
    """Decoder layers followed by a LayerNorm (``decoder.norm``)."""

    def __init__(self, config: ActTransformerSpec) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ACTDecoderLayer(config) for _ in range(config.decoder_layers))
        self.norm = nn.LayerNorm(config.hidden)

    def forward(self, x: Tensor, memory: Tensor, query_pos: Tensor, memory_pos: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory, query_pos, memory_pos)
        return self.norm(x)


class ACTPolicy(nn.Module):
    """lerobot's ``ACT`` network split into vision, prefill (encoder) and one decoder pass."""

    LEROBOT_RENAMES: tuple[tuple[str, str], ...] = (("model.", ""),)
    LEROBOT_IGNORED: tuple[str, ...] = (
        "normalize_inputs.",
        "normalize_targets.",
        "unnormalize_outputs.",
        "model.vae_encoder_pos_enc",  # fixed sinusoidal table of the CVAE encoder, which inference never runs
    )

    def __init__(self, spec: ActSpec) -> None:
        super().__init__()
        self.spec = spec
        config = spec.transformer
        hidden, state_dim = config.hidden, spec.action.state_dim
        if config.vae_encoder_layers:
            self.vae_encoder = ACTEncoder(config, config.vae_encoder_layers)
            self.vae_encoder_cls_embed = nn.Embedding(1, hidden)
            if state_dim:
                self.vae_encoder_robot_state_input_proj = nn.Linear(state_dim, hidden)
            self.vae_encoder_action_input_proj = nn.Linear(spec.action.action_dim, hidden)
            self.vae_encoder_latent_output_proj = nn.Linear(hidden, config.latent_dim * 2)
        self.backbone = resnet_trunk(spec.backbone)
        self.encoder = ACTEncoder(config, config.encoder_layers)
        self.decoder = ACTDecoder(config)
        if state_dim:
            self.encoder_robot_state_input_proj = nn.Linear(state_dim, hidden)
        self.encoder_latent_input_proj = nn.Linear(config.latent_dim, hidden)
        self.encoder_img_feat_input_proj = nn.Conv2d(spec.backbone.widths[-1], hidden, kernel_size=1)
        self.encoder_1d_feature_pos_embed = nn.Embedding(1 + int(state_dim > 0), hidden)
        self.decoder_pos_embed = nn.Embedding(spec.action.chunk, hidden)
        self.action_head = nn.Linear(hidden, spec.action.action_dim)

    def embed_images(self, images: Tensor) -> Tensor:
        """(B, cameras, 3, H, W) → image tokens (B, cameras * h * w, hidden)."""
        batch, cameras = images.shape[:2]
        features = self.encoder_img_feat_input_proj(self.backbone(images.flatten(0, 1)))
        hidden, height, width = features.shape[1:]
        features = features.reshape(batch, cameras, hidden, height * width).transpose(2, 3)
        return features.reshape(batch, cameras * height * width, hidden)

    def prefill(self, obs: Observation, image_tokens: Tensor) -> ActMemory:
        """Run the transformer encoder over [latent, state, image tokens] once per observation."""
        batch, hidden = image_tokens.shape[0], image_tokens.shape[-1]
        latent = image_tokens.new_zeros(batch, self.spec.transformer.latent_dim)
        tokens = [self.encoder_latent_input_proj(latent)[:, None]]
        if self.spec.action.state_dim:
            tokens.append(self.encoder_robot_state_input_proj(obs.state.to(image_tokens.dtype))[:, None])
        tokens.append(image_tokens)
        memory_pos = self.encoder_positions(image_tokens.shape[1]).to(image_tokens.dtype)
        x = torch.cat(tokens, dim=1).transpose(0, 1)  # (S, B, hidden), lerobot's sequence-first layout
        memory = self.encoder(x, memory_pos[:, None]).transpose(0, 1)
        return ActMemory(memory=memory, memory_pos=memory_pos.expand(batch, -1, hidden).contiguous())

    def prefix(self, obs: Observation) -> ActMemory:
        return self.prefill(obs, self.embed_images(obs.images))

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: ActMemory) -> Tensor:
        """One decoder pass → the action chunk (B, chunk, action_dim); ``x_t`` and ``t`` are not read."""
        memory = cache.memory.transpose(0, 1)
        memory_pos = cache.memory_pos.transpose(0, 1)
        query_pos = self.decoder_pos_embed.weight[:, None]
        queries = memory.new_zeros(query_pos.shape[0], memory.shape[1], memory.shape[2])
        out = self.decoder(queries, memory, query_pos, memory_pos)
        return self.action_head(out.transpose(0, 1))

    def encoder_positions(self, image_token_count: int) -> Tensor:
        """(S, hidden) positional embedding of the encoder inputs: learned 1-D rows, then 2-D sinusoids per camera."""
        height, width = self.spec.backbone.feature_grid
        cameras = image_token_count // (height * width)
        learned = self.encoder_1d_feature_pos_embed.weight
        table = sinusoidal_2d(height, width, self.spec.transformer.hidden, learned.device).to(learned.dtype)
        return torch.cat([learned, table.repeat(cameras, 1)], dim=0)
