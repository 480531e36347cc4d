"""SigLIP vision tower and the two connectors (SmolVLM pixel shuffle, PaliGemma linear projector).

Parameter names follow ``transformers``' ``SiglipVisionTransformer`` so real weights and parity tests map 1:1.
"""

from __future__ import annotations

from torch import Tensor, nn

from vlabench.models.replicas.layers import Attention, PointwiseMLP, SharedInputProjections, merge_heads, split_heads
from vlabench.models.specs import VisionSpec


class SiglipEmbeddings(nn.Module):
    def __init__(self, spec: VisionSpec) -> None:
        super().__init__()
        self.patch_embedding = nn.Conv2d(3, spec.hidden, spec.patch_size, stride=spec.patch_size)
        self.position_embedding = nn.Embedding(spec.patches_per_camera, spec.hidden)

    def forward(self, pixels: Tensor) -> Tensor:
        patches = self.patch_embedding(pixels).flatten(2).transpose(1, 2)
        # contiguous once here: the sum would keep the patches' channel-first strides, and so would every residual
        # add after it, each layer norm then copying its input first
        return (patches + self.position_embedding.weight[None]).contiguous()


class SiglipAttention(SharedInputProjections):
    def __init__(self, spec: VisionSpec) -> None:
        super().__init__()
        self.heads = spec.heads
        self.q_proj = nn.Linear(spec.hidden, spec.hidden)
        self.k_proj = nn.Linear(spec.hidden, spec.hidden)
        self.v_proj = nn.Linear(spec.hidden, spec.hidden)
        self.out_proj = nn.Linear(spec.hidden, spec.hidden)
        self.attend = Attention()

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (split_heads(part, self.heads) for part in self.project(x))
        return self.out_proj(merge_heads(self.attend(q, k, v, None)))


class SiglipEncoderLayer(nn.Module):
    def __init__(self, spec: VisionSpec) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(spec.hidden, eps=spec.layer_norm_eps)
        self.self_attn = SiglipAttention(spec)
        self.layer_norm2 = nn.LayerNorm(spec.hidden, eps=spec.layer_norm_eps)
        self.mlp = PointwiseMLP(spec.hidden, spec.intermediate, "gelu_tanh")

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class SiglipEncoder(nn.Module):
    def __init__(self, spec: VisionSpec) -> None:
        super().__init__()
        self.layers = nn.ModuleList(SiglipEncoderLayer(spec) for _ in range(spec.layers))


class SiglipVisionTower(nn.Module):
    """pixels (N, 3, H, W) -> patch features (N, patches, hidden), post-LayerNorm, no pooling head."""

    def __init__(self, spec: VisionSpec) -> None:
        super().__init__()
        self.embeddings = SiglipEmbeddings(spec)
        self.encoder = SiglipEncoder(spec)
        self.post_layernorm = nn.LayerNorm(spec.hidden, eps=spec.layer_norm_eps)

    def forward(self, pixels: Tensor) -> Tensor:
        x = self.embeddings(pixels)
        for layer in self.encoder.layers:
            x = layer(x)
        return self.post_layernorm(x)


def pixel_shuffle(x: Tensor, factor: int) -> Tensor:
    """Idefics3/SmolVLM space-to-depth: (N, S, D) -> (N, S / factor², D · factor²)."""
    batch, seq, dim = x.shape
    side = int(seq**0.5)
    x = x.view(batch, side, side // factor, dim * factor).permute(0, 2, 1, 3)
    x = x.reshape(batch, side // factor, side // factor, dim * factor * factor).permute(0, 2, 1, 3)
    return x.reshape(batch, seq // factor**2, dim * factor**2)


class ModalityProjection(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)


class PixelShuffleConnector(nn.Module):
    """SmolVLM connector: pixel shuffle then a bias-free linear map to the LLM width."""

    def __init__(self, spec: VisionSpec, llm_hidden: int) -> None:
        super().__init__()
        self.factor = spec.pixel_shuffle_factor
        self.modality_projection = ModalityProjection(spec.hidden * self.factor**2, llm_hidden)

    def forward(self, features: Tensor) -> Tensor:
        return self.modality_projection.proj(pixel_shuffle(features, self.factor))


class LinearProjector(nn.Module):
    """PaliGemma multi-modal projector: one linear map with bias."""

    def __init__(self, spec: VisionSpec, llm_hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(spec.hidden, llm_hidden)

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features)


class EagleConnector(nn.Module):
    """Eagle 2.5 (GR00T N1.5) ``mlp1``: pixel shuffle, then LayerNorm → Linear → GELU → Linear to the LLM width."""

    def __init__(self, spec: VisionSpec, llm_hidden: int) -> None:
        super().__init__()
        self.factor = spec.pixel_shuffle_factor
        width = spec.hidden * self.factor**2
        self.mlp1 = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, llm_hidden), nn.GELU(), nn.Linear(llm_hidden, llm_hidden)
        )

    def forward(self, features: Tensor) -> Tensor:
        return self.mlp1(pixel_shuffle(features, self.factor))


CONNECTORS = {"pixel_shuffle": PixelShuffleConnector, "linear": LinearProjector, "pixel_shuffle_mlp": EagleConnector}


def build_connector(spec: VisionSpec, llm_hidden: int) -> nn.Module:
    return CONNECTORS[spec.connector](spec, llm_hidden)
