"""Specs of the visuomotor policies without a language model: ACT and Diffusion Policy (lerobot configurations)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from vlabench.models.spec_base import ActionLoopKind, ActionSpec, DiffusionActionSpec, PixelRule, SpecBase, _Strict


class ResNetSpec(_Strict):
    """A torchvision-layout ResNet-18 trunk (``layer4`` output, no pooling or fc) and the images it reads."""

    image_height: int = Field(gt=0)
    image_width: int = Field(gt=0)
    crop: int | None = Field(default=None, gt=0, description="Diffusion Policy: square center crop fed to the trunk")
    widths: tuple[int, int, int, int] = (64, 128, 256, 512)
    blocks: tuple[int, int, int, int] = (2, 2, 2, 2)
    norm: Literal["batch", "group"] = Field(description="BatchNorm (frozen, ACT) or GroupNorm(C/16) (Diffusion Policy)")

    @model_validator(mode="after")
    def _check_shapes(self) -> ResNetSpec:
        if self.crop is not None and self.crop > min(self.image_height, self.image_width):
            raise ValueError("crop must fit inside the image")
        if self.norm == "group" and any(width % 16 for width in self.widths):
            raise ValueError("GroupNorm(C // 16) needs every width to be a multiple of 16")
        return self

    @property
    def input_side(self) -> tuple[int, int]:
        return (self.crop, self.crop) if self.crop else (self.image_height, self.image_width)

    @property
    def feature_grid(self) -> tuple[int, int]:
        """The stride-32 feature map of the trunk (torchvision rounding: each stride-2 stage is ceil(x / 2))."""
        height, width = self.input_side
        for _ in range(5):
            height, width = (height + 1) // 2, (width + 1) // 2
        return height, width


class ActTransformerSpec(_Strict):
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    feedforward: int = Field(gt=0)
    encoder_layers: int = Field(gt=0)
    decoder_layers: int = Field(gt=0, description="layers run at inference (lerobot: 1)")
    vae_encoder_layers: int = Field(ge=0, description="CVAE encoder: held in the checkpoint, used only in training")
    latent_dim: int = Field(gt=0)

    @model_validator(mode="after")
    def _check_hidden(self) -> ActTransformerSpec:
        if self.hidden % self.heads or self.hidden % 4:
            raise ValueError("hidden must split into heads and into the 2-D sinusoid's sin/cos quarters")
        return self


class ActSpec(SpecBase):
    """ACT: ResNet-18 features and the state go through a transformer encoder once; the decoder's ``chunk`` queries
    cross-attend to that memory in one pass."""

    family: Literal["act"]
    pixels = PixelRule("stretch", "imagenet")  # the ResNet-18 backbone's ImageNet statistics
    replica = "vlabench.models.replicas.act:ACTPolicy"
    backbone: ResNetSpec
    transformer: ActTransformerSpec
    action: ActionSpec

    @model_validator(mode="after")
    def _check_single_pass(self) -> ActSpec:
        if self.action.steps != 1:
            raise ValueError("ACT predicts its chunk in one pass: action.steps must be 1")
        return self

    @property
    def image_shape(self) -> tuple[int, int]:
        return (self.backbone.image_height, self.backbone.image_width)

    @property
    def tokens_per_camera(self) -> int:
        height, width = self.backbone.feature_grid
        return height * width

    @property
    def action_loop(self) -> ActionLoopKind:
        return "single_pass"

    def prefix_tokens(self, cameras: int) -> int:
        """Latent + state + image-feature tokens seen by the encoder."""
        return 1 + int(self.action.state_dim > 0) + cameras * self.tokens_per_camera

    def suffix_tokens(self, chunk: int) -> int:
        return chunk

    @property
    def summary(self) -> tuple[str, str]:
        layers = self.transformer
        return (
            f"ResNet-18 + {layers.encoder_layers} encoder layers",
            f"{layers.decoder_layers} decoder layer(s), one pass",
        )


class UnetSpec(_Strict):
    down_dims: tuple[int, ...] = Field(min_length=1)
    kernel_size: int = Field(gt=0)
    groups: int = Field(gt=0)
    step_embed_dim: int = Field(gt=0)
    film_scale: bool = True

    @model_validator(mode="after")
    def _check_groups(self) -> UnetSpec:
        # final_conv's GroupNorm uses lerobot's default of 8 groups whatever `groups` is
        if any(dim % self.groups for dim in self.down_dims) or self.down_dims[0] % 8:
            raise ValueError("every down dim must split into `groups` GroupNorm groups (and the first into 8)")
        if self.step_embed_dim % 2 or self.step_embed_dim < 4:
            raise ValueError("step_embed_dim must be even and at least 4 (sin/cos halves of ≥ 2 frequencies)")
        return self


class DiffusionPolicySpec(SpecBase):
    """Diffusion Policy: per-camera ResNet-18 + spatial-softmax keypoints over ``frames`` observations form a global
    condition once; a 1-D conditional U-Net predicts the noise at every DDPM/DDIM step."""

    family: Literal["diffusion-policy"]
    pixels = PixelRule("stretch", "imagenet")
    replica = "vlabench.models.replicas.diffusion_policy:DiffusionPolicy"
    backbone: ResNetSpec
    keypoints: int = Field(gt=0, description="spatial-softmax keypoints per camera")
    observation_frames: int = Field(gt=0, description="n_obs_steps")
    unet: UnetSpec
    action: DiffusionActionSpec

    @model_validator(mode="after")
    def _check_horizon(self) -> DiffusionPolicySpec:
        if self.action.chunk % 2 ** (len(self.unet.down_dims) - 1):
            raise ValueError("the horizon (action.chunk) must halve at every U-Net downsampling")
        if self.action.actions_per_chunk > self.action.chunk - self.observation_frames + 1:
            raise ValueError("lerobot: n_action_steps <= horizon - n_obs_steps + 1")
        return self

    @property
    def image_shape(self) -> tuple[int, int]:
        return (self.backbone.image_height, self.backbone.image_width)

    @property
    def tokens_per_camera(self) -> int:
        return 1

    @property
    def frames(self) -> int:
        return self.observation_frames

    @property
    def feature_dim(self) -> int:
        """Per-image feature: 2 coordinates per keypoint, then a same-width linear layer."""
        return 2 * self.keypoints

    def global_cond_dim(self, cameras: int) -> int:
        return (self.action.state_dim + self.feature_dim * cameras) * self.observation_frames

    @property
    def action_loop(self) -> ActionLoopKind:
        return self.action.scheduler

    def prefix_tokens(self, cameras: int) -> int:
        return cameras * self.observation_frames

    def suffix_tokens(self, chunk: int) -> int:
        return chunk

    @property
    def summary(self) -> tuple[str, str]:
        dims = "/".join(map(str, self.unet.down_dims))
        return f"ResNet-18 + {self.keypoints} keypoints", f"1-D U-Net {dims}, {self.action.scheduler.upper()}"
