"""Diffusion Policy replica with the two-phase API, mirroring lerobot's state dict.

Source: huggingface/lerobot ``src/lerobot/policies/diffusion/modeling_diffusion.py`` (read at v0.4.3, commit
dea8079) and ``configuration_diffusion.py``: one shared ``DiffusionRgbEncoder`` for all cameras
(``use_separate_rgb_encoder_per_camera=False``), ``use_group_norm=True``, ``DiffusionConditionalUnet1d``. Module
and parameter names are lerobot's ``DiffusionModel``'s, so a lerobot ``model.safetensors`` loads after stripping the
``diffusion.`` prefix (``LEROBOT_RENAMES``).

Inputs: ``obs.images`` is (B, cameras * frames, 3, H, W), frame-major (all cameras of frame 0, then frame 1, ...;
frames = ``n_obs_steps``, oldest first). ``obs.state`` is (B, frames * state_dim), frame-major as well.
``obs.language_tokens`` and ``obs.language_mask`` are ignored.

Phases:
- ``embed_images``: per image, center crop to ``crop`` (eval mode), ResNet-18 trunk with GroupNorm, SpatialSoftmax
  keypoints, ``out`` Linear + ReLU → (B, cameras * frames, 2 * keypoints);
- ``prefill``: per frame [state, camera features] concatenated and flattened → :class:`GlobalCondition`;
- ``denoise_step``: the 1-D conditional U-Net on (x_t, DDPM timestep t, condition) → predicted noise ε.
  The DDPM/DDIM update is the action loop's.

The U-Net's FiLM input width depends on the camera count: the replica is built for ``spec.cameras``.
SpatialSoftmax's coordinate grid is computed from static shapes at call time; lerobot stores it as the persistent
buffer ``rgb_encoder.pool.pos_grid``, a fixed linspace grid, listed in ``LEROBOT_IGNORED``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import torch
from torch import Tensor, nn

from vlabench.models.replicas.caches import BatchedCache
from vlabench.models.replicas.flow_vla import Observation
from vlabench.models.replicas.resnet import resnet_trunk
from vlabench.models.specs_visuomotor import DiffusionPolicySpec, UnetSpec

FINAL_CONV_GROUPS = 8  # lerobot builds final_conv's DiffusionConv1dBlock with its default n_groups, not config's


@dataclass
class GlobalCondition(BatchedCache):
    """What every U-Net call reads from the prefix."""

    cond: Tensor  # (B, global_cond_dim): per frame [state, camera features], flattened


class SpatialSoftmax(nn.Module):
    """1×1 conv to ``keypoints`` maps, softmax over positions, expected (x, y) in [-1, 1] per keypoint."""

    def __init__(self, in_channels: int, keypoints: int, feature_grid: tuple[int, int]) -> None:
        super().__init__()
        self.nets = nn.Conv2d(in_channels, keypoints, kernel_size=1)
        self.feature_grid = feature_grid

    def forward(self, features: Tensor) -> Tensor:
        """(N, C, h, w) → (N, keypoints, 2)."""
        height, width = self.feature_grid
        maps = self.nets(features)
        attention = maps.reshape(maps.shape[0], maps.shape[1], height * width).softmax(dim=-1)
        return attention @ self.pos_grid(maps.dtype, maps.device)

    def pos_grid(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """(h * w, 2) grid of (x, y), x varying fastest: lerobot's ``np.meshgrid`` of two ``linspace(-1, 1)``."""
        height, width = self.feature_grid
        xs = torch.linspace(-1.0, 1.0, width, device=device)
        ys = torch.linspace(-1.0, 1.0, height, device=device)
        grid = torch.stack((xs[None, :].expand(height, width), ys[:, None].expand(height, width)), dim=-1)
        return grid.reshape(height * width, 2).to(dtype)


class DiffusionRgbEncoder(nn.Module):
    """Center crop → ResNet-18 trunk (GroupNorm) → SpatialSoftmax → Linear + ReLU."""

    def __init__(self, spec: DiffusionPolicySpec) -> None:
        super().__init__()
        backbone = spec.backbone
        # torchvision CenterCrop's offsets, fixed by the spec's image size (static for export)
        self.crop = backbone.crop
        self.crop_offsets = (
            (round((backbone.image_height - backbone.crop) / 2.0), round((backbone.image_width - backbone.crop) / 2.0))
            if backbone.crop
            else (0, 0)
        )
        self.backbone = nn.Sequential(*resnet_trunk(spec.backbone).children())
        self.pool = SpatialSoftmax(spec.backbone.widths[-1], spec.keypoints, spec.backbone.feature_grid)
        self.out = nn.Linear(2 * spec.keypoints, spec.feature_dim)
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        """(N, 3, H, W) → (N, feature_dim)."""
        if self.crop is not None:
            top, left = self.crop_offsets
            x = x[..., top : top + self.crop, left : left + self.crop]
        return self.relu(self.out(self.pool(self.backbone(x)).flatten(1)))


class DiffusionSinusoidalPosEmb(nn.Module):
    """Sinusoidal embedding of the diffusion timestep, in fp32: [sin, cos] halves."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        half_dim = self.dim // 2
        frequencies = torch.exp(torch.arange(half_dim, device=x.device) * -(math.log(10000) / (half_dim - 1)))
        angles = x.float()[:, None] * frequencies[None, :]
        return torch.cat((angles.sin(), angles.cos()), dim=-1)


class DiffusionConv1dBlock(nn.Module):
    """Conv1d → GroupNorm → Mish."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, n_groups: int = FINAL_CONV_GROUPS):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2),
            nn.GroupNorm(n_groups, out_channels),
            nn.Mish(),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)


class DiffusionConditionalResidualBlock1d(nn.Module):
    """Two Conv1d blocks with FiLM (scale and bias, or bias only) from the condition in between, plus a residual."""

    def __init__(self, in_channels: int, out_channels: int, cond_dim: int, unet: UnetSpec) -> None:
        super().__init__()
        self.film_scale = unet.film_scale
        self.out_channels = out_channels
        self.conv1 = DiffusionConv1dBlock(in_channels, out_channels, unet.kernel_size, unet.groups)
        self.cond_encoder = nn.Sequential(
            nn.Mish(), nn.Linear(cond_dim, out_channels * 2 if unet.film_scale else out_channels)
        )
        self.conv2 = DiffusionConv1dBlock(out_channels, out_channels, unet.kernel_size, unet.groups)
        self.residual_conv = nn.Conv1d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        out = self.conv1(x)
        cond_embed = self.cond_encoder(cond)[:, :, None]
        if self.film_scale:
            out = cond_embed[:, : self.out_channels] * out + cond_embed[:, self.out_channels :]
        else:
            out = out + cond_embed
        return self.conv2(out) + self.residual_conv(x)


class DiffusionConditionalUnet1d(nn.Module):
    """lerobot's 1-D U-Net: step encoder, down modules (2 blocks + stride-2 conv but the last), 2 mid blocks, up
    modules (2 blocks over [x ; skip] + transposed conv), final conv block and 1×1 conv to the action dim."""

    def __init__(self, unet: UnetSpec, action_dim: int, global_cond_dim: int) -> None:
        super().__init__()
        embed = unet.step_embed_dim
        self.diffusion_step_encoder = nn.Sequential(
            DiffusionSinusoidalPosEmb(embed), nn.Linear(embed, embed * 4), nn.Mish(), nn.Linear(embed * 4, embed)
        )
        cond_dim = embed + global_cond_dim
        dims = unet.down_dims
        in_out = [(action_dim, dims[0]), *pairwise(dims)]

        def block(in_channels: int, out_channels: int) -> DiffusionConditionalResidualBlock1d:
            return DiffusionConditionalResidualBlock1d(in_channels, out_channels, cond_dim, unet)

        self.down_modules = nn.ModuleList(
            nn.ModuleList(
                [
                    block(dim_in, dim_out),
                    block(dim_out, dim_out),
                    nn.Conv1d(dim_out, dim_out, 3, 2, 1) if index < len(in_out) - 1 else nn.Identity(),
                ]
            )
            for index, (dim_in, dim_out) in enumerate(in_out)
        )
        self.mid_modules = nn.ModuleList([block(dims[-1], dims[-1]), block(dims[-1], dims[-1])])
        self.up_modules = nn.ModuleList(
            nn.ModuleList(
                [block(dim_in * 2, dim_out), block(dim_out, dim_out), nn.ConvTranspose1d(dim_out, dim_out, 4, 2, 1)]
            )
            for dim_out, dim_in in reversed(in_out[1:])
        )
        self.final_conv = nn.Sequential(
            DiffusionConv1dBlock(dims[0], dims[0], unet.kernel_size), nn.Conv1d(dims[0], action_dim, 1)
        )

    def forward(self, x: Tensor, timestep: Tensor, global_cond: Tensor) -> Tensor:
        """(B, T, action_dim), (B,), (B, global_cond_dim) → (B, T, action_dim)."""
        x = x.transpose(1, 2)
        position, linear1, mish, linear2 = self.diffusion_step_encoder
        step = linear2(mish(linear1(position(timestep).to(global_cond.dtype))))
        feature = torch.cat([step, global_cond], dim=-1)
        skips = []
        for resnet, resnet2, downsample in self.down_modules:
            x = resnet2(resnet(x, feature), feature)
            skips.append(x)
            x = downsample(x)
        for mid_module in self.mid_modules:
            x = mid_module(x, feature)
        for resnet, resnet2, upsample in self.up_modules:
            x = torch.cat((x, skips.pop()), dim=1)
            x = upsample(resnet2(resnet(x, feature), feature))
        return self.final_conv(x).transpose(1, 2)


class DiffusionPolicy(nn.Module):
    """lerobot's ``DiffusionModel`` network split into vision, prefill (global condition) and one U-Net call."""

    LEROBOT_RENAMES: tuple[tuple[str, str], ...] = (("diffusion.", ""),)
    LEROBOT_IGNORED: tuple[str, ...] = (
        "normalize_inputs.",
        "normalize_targets.",
        "unnormalize_outputs.",
        "diffusion.rgb_encoder.pool.pos_grid",  # fixed coordinate grid, recomputed from the feature-map shape
    )

    def __init__(self, spec: DiffusionPolicySpec) -> None:
        super().__init__()
        self.spec = spec
        self.rgb_encoder = DiffusionRgbEncoder(spec)
        self.unet = DiffusionConditionalUnet1d(spec.unet, spec.action.action_dim, spec.global_cond_dim(spec.cameras))

    def embed_images(self, images: Tensor) -> Tensor:
        """(B, cameras * frames, 3, H, W) → per-image features (B, cameras * frames, feature_dim)."""
        features = self.rgb_encoder(images.flatten(0, 1))
        return features.reshape(images.shape[0], images.shape[1], features.shape[-1])

    def prefill(self, obs: Observation, image_tokens: Tensor) -> GlobalCondition:
        """Concatenate per frame [state, all cameras' features] and flatten (lerobot's global conditioning)."""
        batch, frames = image_tokens.shape[0], self.spec.frames
        state = obs.state.to(image_tokens.dtype).reshape(batch, frames, self.spec.action.state_dim)
        features = image_tokens.reshape(batch, frames, -1)
        return GlobalCondition(cond=torch.cat([state, features], dim=-1).flatten(1))

    def prefix(self, obs: Observation) -> GlobalCondition:
        return self.prefill(obs, self.embed_images(obs.images))

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: GlobalCondition) -> Tensor:
        """Predicted noise ε (B, horizon, action_dim) for x_t at DDPM timestep t (B,), as float."""
        return self.unet(x_t, t, cache.cond)
