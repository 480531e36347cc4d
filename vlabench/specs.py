"""Model specifications (``profiles/models/*.yaml``): the schema and the loader."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vlabench.errors import unknown_name
from vlabench.yaml_data import load_packaged, packaged_names, parse_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VisionSpec(_Strict):
    """A SigLIP-family vision tower and the connector that maps its patches to LLM tokens."""

    image_size: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0)
    heads: int = Field(gt=0)
    intermediate: int = Field(gt=0)
    layer_norm_eps: float = 1e-6
    connector: Literal["pixel_shuffle", "linear"]
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

    style: Literal["llama", "gemma"]
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


class ActionSpec(_Strict):
    chunk: int = Field(gt=0)
    actions_per_chunk: int = Field(gt=0, description="actions executed per predicted chunk (n_action_steps)")
    steps: int = Field(gt=0, description="flow-matching Euler steps")
    action_dim: int = Field(gt=0)
    state_dim: int = Field(gt=0)
    state_placement: Literal["prefix_token", "suffix_token", "language"]
    action_attention: Literal["bidirectional", "causal"] = Field(
        description="how action tokens see each other (SmolVLA: causal; π0/π0.5: one bidirectional block)"
    )
    time_min_period: float = 4e-3
    time_max_period: float = 4.0


class ParamReference(_Strict):
    params: int = Field(gt=0, description="published total parameter count")
    source: str
    breakdown: dict[str, int] = Field(default_factory=dict)


class ModelSpec(_Strict):
    name: str
    family: Literal["smolvla", "pi0", "pi05"]
    display_name: str
    description: str
    architecture_sources: list[str]
    reference: ParamReference | None = Field(description="published parameter count; None for -tiny variants")
    variant_of: str | None = Field(default=None, description="full-size model a -tiny variant mirrors")
    cameras: int = Field(gt=0, description="default camera count")
    language_tokens: int = Field(gt=0, description="instruction length after padding")
    vision: VisionSpec
    llm: LanguageModelSpec
    expert: ExpertSpec
    action: ActionSpec

    @model_validator(mode="after")
    def _check_pairing(self) -> ModelSpec:
        if (self.reference is None) == (self.variant_of is None):
            raise ValueError("give `reference` for a full-size model or `variant_of` for a -tiny variant")
        if self.expert.layers != self.llm.layers:
            raise ValueError("the expert must have one layer per kept LLM layer (it reads that layer's K/V)")
        if self.expert.attention == "joint" and (
            self.expert.kv_heads,
            self.expert.head_dim,
        ) != (self.llm.kv_heads, self.llm.head_dim):
            raise ValueError("joint attention needs the expert's K/V geometry to equal the LLM's")
        return self

    @property
    def spec_hash(self) -> str:
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def model_names() -> list[str]:
    return packaged_names("models")


@cache
def load_model_spec(name: str) -> ModelSpec:
    """Load and validate ``profiles/models/<name>.yaml``; unknown names suggest the closest one."""
    names = model_names()
    if name not in names:
        raise unknown_name("model", name, names)
    return load_packaged("models", name, ModelSpec, "model spec")


def parse_model_spec(text: str, origin: str) -> ModelSpec:
    return parse_yaml(text, ModelSpec, origin, "model spec")
