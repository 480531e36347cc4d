"""Model specifications (``profiles/models/*.yaml``): the schema and the loader."""

from __future__ import annotations

from functools import cache, reduce
from operator import or_
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, TypeAdapter, model_validator

from vlabench.errors import unknown_name
from vlabench.models.spec_base import ActionLoopKind, ActionSpec, PixelRule, SpecBase, _Strict
from vlabench.models.specs_visuomotor import ActSpec, DiffusionPolicySpec
from vlabench.models.token_rules import bin_actions, fast_actions
from vlabench.yaml_data import load_packaged, packaged_names, parse_yaml


class VisionSpec(_Strict):
    """A SigLIP-family vision tower and the connector that maps its patches to LLM tokens."""

    image_size: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0)
    heads: int = Field(gt=0)
    intermediate: int = Field(gt=0)
    layer_norm_eps: float = 1e-6
    connector: Literal["pixel_shuffle", "linear", "pixel_shuffle_mlp"] = Field(
        description="SmolVLM pixel shuffle + linear, PaliGemma linear, or Eagle pixel shuffle + LayerNorm-MLP (GR00T)"
    )
    pixel_shuffle_factor: int = Field(default=1, gt=0)
    scale_embeddings: bool = Field(description="multiply image tokens by sqrt(LLM width), as SmolVLA does")

    @property
    def patches_per_camera(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def tokens_per_camera(self) -> int:
        return self.patches_per_camera // self.pixel_shuffle_factor**2

    @model_validator(mode="after")
    def _check_geometry(self) -> VisionSpec:
        grid = self.image_size // self.patch_size
        if self.image_size % self.patch_size or grid % self.pixel_shuffle_factor:
            raise ValueError("image_size must be a multiple of patch_size * pixel_shuffle_factor")
        if self.hidden % self.heads:
            raise ValueError("vision hidden must be divisible by heads")
        return self


class DecoderSpec(_Strict):
    """A decoder-only transformer stack (the VLM's language model or the action expert)."""

    style: Literal["llama", "gemma", "qwen3"] = Field(description="qwen3: llama with per-head q/k RMSNorm")
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate: int = Field(gt=0)
    rms_eps: float
    rope_theta: float = 10000.0

    @model_validator(mode="after")
    def _check_heads(self) -> DecoderSpec:
        if self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        return self


class LanguageModelSpec(DecoderSpec):
    vocab: int = Field(gt=0)
    published_layers: int = Field(gt=0, description="layers of the published LLM; `layers` are the ones kept")
    tie_embeddings: bool = Field(description="False: an lm_head matrix is held in memory (unused at inference)")


class ExpertSpec(DecoderSpec):
    attention: Literal["alternating_cross", "joint"]
    self_attn_every: int = Field(default=1, gt=0, description="alternating_cross: self-attention on layers i % n == 0")
    time_conditioning: Literal["concat_mlp", "adarms"]


class FlowActionSpec(ActionSpec):
    state_placement: Literal["prefix_token", "suffix_token", "language"]
    action_attention: Literal["bidirectional", "causal"] = Field(
        description="how action tokens see each other (SmolVLA: causal; π0/π0.5: one bidirectional block)"
    )
    time_min_period: float = 4e-3
    time_max_period: float = 4.0


class VisionLanguageSpec(SpecBase):
    """Families with a SigLIP-style vision tower feeding a decoder LLM: their observation geometry."""

    vision: VisionSpec
    llm: LanguageModelSpec

    @property
    def image_shape(self) -> tuple[int, int]:
        return (self.vision.image_size, self.vision.image_size)

    @property
    def tokens_per_camera(self) -> int:
        return self.vision.tokens_per_camera

    @property
    def token_vocab(self) -> int:
        return self.llm.vocab


class FlowVLASpec(VisionLanguageSpec):
    """SmolVLA, π0, π0.5: a VLM prefix whose per-layer K/V a flow-matching action expert reads at every step."""

    family: Literal["smolvla", "pi0", "pi05"]
    pixels = PixelRule("pad", "symmetric")  # SmolVLA's and openpi's resize_with_pad, SigLIP's [-1, 1]
    replica = "vlabench.models.replicas.flow_vla:FlowMatchingVLA"
    expert: ExpertSpec
    action: FlowActionSpec

    @model_validator(mode="after")
    def _check_pairing(self) -> FlowVLASpec:
        if self.expert.layers != self.llm.layers:
            raise ValueError("the expert must have one layer per kept LLM layer (it reads that layer's K/V)")
        if self.expert.attention == "joint" and (
            self.expert.kv_heads,
            self.expert.head_dim,
        ) != (self.llm.kv_heads, self.llm.head_dim):
            raise ValueError("joint attention needs the expert's K/V geometry to equal the LLM's")
        return self

    @property
    def action_loop(self) -> ActionLoopKind:
        return "euler"

    def prefix_tokens(self, cameras: int) -> int:
        state_token = int(self.action.state_placement == "prefix_token")
        return cameras * self.tokens_per_camera + self.language_tokens + state_token

    def suffix_tokens(self, chunk: int) -> int:
        return chunk + int(self.action.state_placement == "suffix_token")

    @property
    def summary(self) -> tuple[str, str]:
        expert = self.expert
        return (
            f"{self.llm.layers}/{self.llm.published_layers} {self.llm.style} layers",
            f"expert {expert.layers}×{expert.hidden} {expert.attention}, Euler",
        )


class AdapterSpec(_Strict):
    """GR00T's VL self-attention: transformer blocks over the VLM features, once per observation."""

    layers: int = Field(gt=0)
    heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    ff_mult: int = Field(default=4, gt=0)


class DiTSpec(_Strict):
    """GR00T's action DiT: AdaLN blocks, even blocks cross-attend to the VL features, odd ones self-attend."""

    layers: int = Field(gt=0)
    alternate_text_every: int | None = Field(
        default=None,
        gt=0,
        description="N1.6's AlternateVLDiT: cross-attention block i attends to the text tokens when i is a multiple "
        "of 2 × this, else to the image tokens (masks over the same keys); None: every cross block sees all tokens",
    )
    heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    output_dim: int = Field(gt=0)
    ff_mult: int = Field(default=4, gt=0)
    timestep_buckets: int = Field(default=1000, gt=0)
    time_channels: int = Field(default=256, gt=0)
    max_positions: int = Field(default=1024, gt=0)

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim


class Gr00tHeadSpec(_Strict):
    """Per-embodiment state/action encoders and action decoder, and the learned future tokens."""

    embodiments: int = Field(gt=0)
    state_hidden: int = Field(gt=0)
    decoder_hidden: int = Field(gt=0)
    future_tokens: int = Field(ge=0)
    vl_features: Literal["pre-norm", "post-norm"] = Field(
        default="pre-norm",
        description="the head reads the last kept Qwen3 layer before (N1.5) or after (N1.6) the final RMSNorm",
    )


class Gr00tSpec(VisionLanguageSpec):
    """GR00T N1.5 and N1.6: Eagle (SigLIP2 + pixel shuffle + MLP, Qwen3 cut to its first layers) gives VL features;
    N1.5 runs a VL self-attention adapter once; a flow-matching DiT runs every step."""

    family: Literal["gr00t"]
    pixels = PixelRule("stretch", "symmetric")  # Eagle's SigLIP
    replica = "vlabench.models.replicas.gr00t:Gr00tPolicy"
    adapter: AdapterSpec | None = Field(default=None, description="N1.5's VL self-attention (N1.6 has none)")
    dit: DiTSpec
    head: Gr00tHeadSpec
    action: ActionSpec

    @model_validator(mode="after")
    def _check_widths(self) -> Gr00tSpec:
        if self.adapter is not None and self.adapter.heads * self.adapter.head_dim != self.llm.hidden:
            raise ValueError("the VL self-attention runs at the LLM width: adapter heads × head_dim = llm.hidden")
        return self

    @property
    def action_loop(self) -> ActionLoopKind:
        return "euler"

    def prefix_tokens(self, cameras: int) -> int:
        return cameras * self.tokens_per_camera + self.language_tokens

    def suffix_tokens(self, chunk: int) -> int:
        return 1 + self.head.future_tokens + chunk

    @property
    def summary(self) -> tuple[str, str]:
        llm = self.llm
        return (
            f"{llm.layers}/{llm.published_layers} qwen3 layers + {self.adapter.layers if self.adapter else 0} VL-SA",
            f"DiT {self.dit.layers}×{self.dit.inner} AdaLN, Euler",
        )


class ViTSpec(_Strict):
    """One of OpenVLA's two featurizers (timm ViTs read at their second-to-last block)."""

    kind: Literal["dinov2", "siglip"]
    image_size: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0, description="blocks held in the checkpoint")
    used_layers: int = Field(gt=0, description="blocks run: Prismatic reads the second-to-last block's output")
    heads: int = Field(gt=0)
    intermediate: int = Field(gt=0)
    registers: int = Field(default=0, ge=0, description="DINOv2 register tokens (plus one CLS token)")
    layer_norm_eps: float = 1e-6

    @property
    def patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class OpenVLAActionSpec(ActionSpec):
    bins: int = Field(default=256, gt=0, description="action tokens: the last `bins` ids of the vocabulary")
    head_blocks: int = Field(default=2, ge=0, description="OFT: MLP-ResNet blocks of the L1 regression head")


class OpenVLASpec(SpecBase):
    """OpenVLA (7 autoregressive action tokens through Llama-2) and OpenVLA-OFT (one parallel pass over the chunk
    with an L1-regression MLP head)."""

    family: Literal["openvla", "openvla-oft"]
    pixels = PixelRule("stretch", "imagenet")  # Prismatic's resize to the backbone's square input
    replica = "vlabench.models.replicas.autoregressive:OpenVLA"
    towers: tuple[ViTSpec, ViTSpec]
    llm: LanguageModelSpec
    action: OpenVLAActionSpec

    @model_validator(mode="after")
    def _check_towers(self) -> OpenVLASpec:
        if {t.kind for t in self.towers} != {"dinov2", "siglip"} or len({t.patches for t in self.towers}) != 1:
            raise ValueError("OpenVLA fuses one DINOv2 and one SigLIP tower with the same patch grid")
        if self.family == "openvla" and self.action.chunk != 1:
            raise ValueError("openvla decodes one action per inference: action.chunk must be 1")
        return self

    @property
    def fused_width(self) -> int:
        return sum(t.hidden for t in self.towers)

    @property
    def image_shape(self) -> tuple[int, int]:
        return (self.towers[0].image_size, self.towers[0].image_size)

    @property
    def tokens_per_camera(self) -> int:
        return self.towers[0].patches

    @property
    def token_vocab(self) -> int:
        return self.first_action_token

    @property
    def first_action_token(self) -> int:
        """The id of action token 0: the last ``bins`` ids of the vocabulary are the action bins."""
        return self.llm.vocab - self.action.bins

    def actions_from_tokens(self, tokens: Any, chunk: int) -> Any:
        """The chunk decoded ``tokens`` (B, chunk × action_dim) stand for: each the centre of its bin."""
        return bin_actions(tokens, self.action.bins, self.action.chunk, self.action.action_dim)

    @property
    def parallel(self) -> bool:
        return self.family == "openvla-oft"

    @property
    def action_loop(self) -> ActionLoopKind:
        return "single_pass" if self.parallel else "greedy_decode"

    def prefix_tokens(self, cameras: int) -> int:
        proprio = int(self.parallel and self.action.state_dim > 0)
        return cameras * self.tokens_per_camera + self.language_tokens + proprio

    def suffix_tokens(self, chunk: int) -> int:
        return chunk * self.action.action_dim if self.parallel else 1

    @property
    def summary(self) -> tuple[str, str]:
        backbone = f"DINOv2+SigLIP, {self.llm.layers} llama layers"
        if self.parallel:
            return backbone, f"parallel decoding + MLP-ResNet ({self.action.head_blocks} blocks)"
        return backbone, f"{self.action.steps + 1} greedy tokens ({self.action.bins} bins)"


class FastActionSpec(ActionSpec):
    fast_vocab: int = Field(default=2048, gt=0, description="FAST tokens: the last ids before the special tokens")
    skip_tokens: int = Field(default=128, ge=0, description="special tokens at the end of the PaliGemma vocabulary")


class Pi0FastSpec(VisionLanguageSpec):
    """π0-FAST: the π0 PaliGemma backbone decodes FAST action tokens (DCT coefficients, BPE-compressed)."""

    family: Literal["pi0-fast"]
    pixels = PixelRule("pad", "symmetric")  # openpi's resize_with_pad, PaliGemma's SigLIP
    replica = "vlabench.models.replicas.autoregressive:Pi0Fast"
    action: FastActionSpec

    @property
    def token_vocab(self) -> int:
        return self.first_action_token

    @property
    def first_action_token(self) -> int:
        """The id of FAST token 0: the FAST vocabulary sits below the ``skip_tokens`` last ids."""
        return self.llm.vocab - self.action.fast_vocab - self.action.skip_tokens

    def actions_from_tokens(self, tokens: Any, chunk: int) -> Any:
        """The ``chunk`` actions decoded FAST ``tokens`` stand for (quantized DCT coefficients, inverted)."""
        return fast_actions(tokens, self.action.fast_vocab, chunk, self.action.action_dim)

    @property
    def action_loop(self) -> ActionLoopKind:
        return "greedy_decode"

    def prefix_tokens(self, cameras: int) -> int:
        return cameras * self.tokens_per_camera + self.language_tokens

    def suffix_tokens(self, chunk: int) -> int:
        return 1

    @property
    def summary(self) -> tuple[str, str]:
        return f"{self.llm.layers} gemma layers", f"{self.action.steps + 1} greedy FAST tokens"


SPEC_CLASSES: list[type[SpecBase]] = [FlowVLASpec, Gr00tSpec, OpenVLASpec, Pi0FastSpec, ActSpec, DiffusionPolicySpec]
"""Every family's spec class, one registration each: model YAML files are read against them; families() lists them."""
ModelSpec = Annotated[reduce(or_, SPEC_CLASSES), Field(discriminator="family")]


@cache
def _adapter(classes: tuple[type[SpecBase], ...]) -> TypeAdapter:
    return TypeAdapter(Annotated[reduce(or_, classes), Field(discriminator="family")])


def spec_adapter() -> TypeAdapter:
    """Reads a model YAML into the spec class its ``family`` names, among those registered now."""
    return _adapter(tuple(SPEC_CLASSES))


def families() -> list[str]:
    """Every registered family's name, in registration order."""
    return [family for spec in SPEC_CLASSES for family in get_args(spec.model_fields["family"].annotation)]


def model_names() -> list[str]:
    return packaged_names("models")


@cache
def load_model_spec(name: str) -> ModelSpec:
    """Load and validate ``profiles/models/<name>.yaml``; unknown names suggest the closest one."""
    names = model_names()
    if name not in names:
        raise unknown_name("model", name, names)
    return load_packaged("models", name, spec_adapter(), "model spec")


def parse_model_spec(text: str, origin: str) -> ModelSpec:
    return parse_yaml(text, spec_adapter(), origin, "model spec")
