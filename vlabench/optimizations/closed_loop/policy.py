"""A small flow-matching policy with the two phases of a VLA: a prefix (the "VLM prefill") and an action expert.

``prefix`` encodes the observation into a few prefix tokens and keeps every layer's K/V, like a VLM prefill.
``denoise_step`` runs the action expert: action tokens attend to the same layer's prefix K/V plus their own,
time-conditioned by a sinusoidal embedding through adaptive layer norms. Actions are raw torques in [-1, 1]
(the scale of the noise); observations are normalized with statistics stored in the module's buffers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlabench.models.replicas import PrefixCache
from vlabench.optimizations.closed_loop.reacher import ACTION_DIM, OBS_DIM


def sinusoidal_embedding(t: Tensor, width: int) -> Tensor:
    """(B,) times in [0, 1] → (B, width) sin/cos features over log-spaced frequencies."""
    half = width // 2
    frequencies = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device, dtype=t.dtype) / half)
    angles = 1000.0 * t[:, None] * frequencies[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def project(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, N, width) → q, k, v of shape (B, heads, N, head_dim)."""
        batch, tokens, _ = h.shape
        qkv = self.qkv(h).view(batch, tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]

    def merge(self, attended: Tensor) -> Tensor:
        """(B, heads, N, head_dim) → (B, N, width) through the output projection."""
        batch, _, tokens, _ = attended.shape
        return self.out(attended.transpose(1, 2).reshape(batch, tokens, -1))


def _mlp(width: int, ratio: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width, ratio * width), nn.GELU(), nn.Linear(ratio * width, width))


class _PrefixLayer(nn.Module):
    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = _Attention(width, heads)
        self.mlp = _mlp(width, mlp_ratio)

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.attention.project(self.norm1(h))
        h = h + self.attention.merge(F.scaled_dot_product_attention(q, k, v))
        return h + self.mlp(self.norm2(h)), k, v


class _ExpertLayer(nn.Module):
    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False)
        self.modulation = nn.Linear(width, 4 * width)
        nn.init.zeros_(self.modulation.weight)
        nn.init.zeros_(self.modulation.bias)
        self.attention = _Attention(width, heads)
        self.mlp = _mlp(width, mlp_ratio)

    def forward(self, h: Tensor, time: Tensor, prefix_k: Tensor, prefix_v: Tensor) -> Tensor:
        shift1, scale1, shift2, scale2 = self.modulation(time)[:, None, :].chunk(4, dim=-1)
        q, k, v = self.attention.project(self.norm1(h) * (1 + scale1) + shift1)
        keys, values = torch.cat([prefix_k, k], dim=-2), torch.cat([prefix_v, v], dim=-2)
        h = h + self.attention.merge(F.scaled_dot_product_attention(q, keys, values))
        return h + self.mlp(self.norm2(h) * (1 + scale2) + shift2)


class SmallFlowPolicy(nn.Module):
    """Prefix encoder + action expert; ``prefix`` and ``denoise_step`` plug into EulerLoop and FusionLoop."""

    def __init__(
        self,
        horizon: int = 8,
        width: int = 64,
        heads: int = 4,
        layers: int = 2,
        prefix_tokens: int = 4,
        mlp_ratio: int = 2,
        steps: int = 10,
    ) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not divisible by {heads} heads")
        self.horizon, self.width, self.prefix_tokens, self.steps = horizon, width, prefix_tokens, steps
        self.register_buffer("obs_mean", torch.zeros(OBS_DIM))
        self.register_buffer("obs_std", torch.ones(OBS_DIM))
        self.obs_in = nn.Linear(OBS_DIM, prefix_tokens * width)
        self.prefix_position = nn.Parameter(torch.randn(prefix_tokens, width) * 0.02)
        self.prefix_layers = nn.ModuleList(_PrefixLayer(width, heads, mlp_ratio) for _ in range(layers))
        self.action_in = nn.Linear(ACTION_DIM, width)
        self.action_position = nn.Parameter(torch.randn(horizon, width) * 0.02)
        self.time_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU())
        self.expert_layers = nn.ModuleList(_ExpertLayer(width, heads, mlp_ratio) for _ in range(layers))
        self.action_norm = nn.LayerNorm(width)
        self.action_out = nn.Linear(width, ACTION_DIM)

    def set_normalization(self, mean: Tensor, std: Tensor) -> None:
        """Observation statistics (saved with the weights)."""
        self.obs_mean.copy_(mean)
        self.obs_std.copy_(std.clamp_min(1e-6))

    def prefix(self, obs: Tensor) -> PrefixCache:
        """(B, OBS_DIM) observations → every layer's prefix K/V, (layers, B, heads, P, head_dim) each."""
        normalized = (obs - self.obs_mean) / self.obs_std
        h = self.obs_in(normalized).view(-1, self.prefix_tokens, self.width) + self.prefix_position
        keys, values = [], []
        for layer in self.prefix_layers:
            h, k, v = layer(h)
            keys.append(k)
            values.append(v)
        valid = torch.ones(obs.shape[0], self.prefix_tokens, dtype=torch.bool, device=obs.device)
        return PrefixCache(keys=torch.stack(keys), values=torch.stack(values), valid=valid, state=normalized)

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        """Velocity (B, H, ACTION_DIM) at x_t (B, H, ACTION_DIM) and time t (B,) given the prefix cache."""
        # the sinusoid in fp32 whatever the policy's dtype (as the replicas do): bf16 times × 1000 lose whole radians
        time = self.time_mlp(sinusoidal_embedding(t.float(), self.width).to(x_t.dtype))
        h = self.action_in(x_t) + self.action_position
        for index, layer in enumerate(self.expert_layers):
            h = layer(h, time, cache.keys[index], cache.values[index])
        return self.action_out(self.action_norm(h))

    def synchronize(self) -> None:
        """Nothing to wait for on the CPU (FusionLoop's synchronize hook)."""
