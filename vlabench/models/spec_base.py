"""What every model spec shares: identity, provenance, observation geometry and the action loop it runs."""

from __future__ import annotations

import hashlib
import json
from typing import ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ActionSpec(_Strict):
    """What every action head produces: a chunk of ``chunk`` actions of ``action_dim``, in ``steps`` head calls."""

    chunk: int = Field(gt=0)
    actions_per_chunk: int = Field(gt=0, description="actions executed per predicted chunk (n_action_steps)")
    steps: int = Field(gt=0, description="action-head calls per chunk: denoising steps, decode steps or 1")
    action_dim: int = Field(gt=0)
    state_dim: int = Field(ge=0, description="0: the policy reads no proprioceptive state")


class DiffusionActionSpec(ActionSpec):
    """A DDPM-trained noise predictor sampled with DDPM (all ``train_timesteps``) or DDIM (``steps`` of them)."""

    scheduler: Literal["ddpm", "ddim"] = "ddpm"
    train_timesteps: int = Field(default=100, gt=0)
    beta_schedule: Literal["squaredcos_cap_v2", "linear"] = "squaredcos_cap_v2"
    beta_start: float = 1e-4
    beta_end: float = 0.02
    clip_sample: bool = True
    clip_sample_range: float = 1.0

    @model_validator(mode="after")
    def _check_steps(self) -> DiffusionActionSpec:
        if self.steps > self.train_timesteps or (self.scheduler == "ddpm" and self.steps != self.train_timesteps):
            raise ValueError("DDPM runs every training timestep; DDIM runs at most that many")
        return self


class ParamReference(_Strict):
    params: int = Field(gt=0, description="published total parameter count")
    source: str
    tolerance: float = Field(
        default=0.02,
        gt=0,
        lt=1,
        description="relative; wider where the published figure is a size class or an estimate",
    )
    breakdown: dict[str, int] = Field(default_factory=dict)


ActionLoopKind = Literal["euler", "ddpm", "ddim", "single_pass", "greedy_decode"]


class TrainedPolicy(_Strict):
    """Weights vlabench trained for this spec, shipped with it, so task success can be measured: a lerobot-layout
    folder inside the packaged profiles, loaded by default (through ``--checkpoint``'s loader) when no
    ``--checkpoint`` is given."""

    benchmark: Literal["metaworld"] = Field(description="the closed-loop benchmark it was trained and is judged on")
    checkpoint: str = Field(description="folder under profiles/ (package data), e.g. checkpoints/<model>")
    training: str = Field(description="the committed script that reproduces it")


class PixelRule(NamedTuple):
    """How a family's camera frames reach the model: ``resize`` to its size (``pad``: resize with padding, keeping
    the aspect ratio; ``stretch``), then the value ``range`` its vision tower takes (``symmetric``: [-1, 1];
    ``imagenet``: ImageNet's mean and deviation)."""

    resize: Literal["pad", "stretch"]
    range: Literal["symmetric", "imagenet"]


class SpecBase(_Strict):
    """What every model family shares: identity, provenance, the observation it reads and the chunk it returns.

    A family's spec class (its ``family`` literal, registered in ``specs.SPEC_CLASSES``) also carries the family's
    rules as class attributes: ``pixels``, the input pipeline's rule for its frames, and ``replica``, its torch
    module."""

    pixels: ClassVar[PixelRule]
    replica: ClassVar[str]
    """The family's replica module, ``module:Class`` (imported when the model is built)."""

    name: str
    display_name: str
    description: str
    architecture_sources: list[str]
    reference: ParamReference | None = Field(description="published parameter count; None for -tiny variants")
    variant_of: str | None = Field(default=None, description="full-size model a -tiny variant mirrors")
    cameras: int = Field(gt=0, description="default camera count")
    language_tokens: int = Field(ge=0, description="instruction length after padding (0: no language input)")
    checkpoint: str | None = Field(
        default=None, description="set by --checkpoint: path:size:mtime of the lerobot weights the replica loads"
    )
    trained: TrainedPolicy | None = Field(default=None, description="weights vlabench trained for task success")

    @model_validator(mode="after")
    def _check_reference(self) -> SpecBase:
        if (self.reference is None) == (self.variant_of is None):
            raise ValueError("give `reference` for a full-size model or `variant_of` for a -tiny variant")
        return self

    @property
    def spec_hash(self) -> str:
        unset = {"trained"} if self.trained is None else None  # specs without trained weights keep their hashes
        canonical = json.dumps(self.model_dump(mode="json", exclude=unset), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    # Observation geometry and the action loop; each family defines these from its own fields.
    @property
    def image_shape(self) -> tuple[int, int]:
        raise NotImplementedError

    @property
    def tokens_per_camera(self) -> int:
        raise NotImplementedError

    @property
    def frames(self) -> int:
        """Observation history: images and states per camera the policy reads at once."""
        return 1

    @property
    def token_vocab(self) -> int:
        """Range of the synthetic instruction token ids (1 when the model reads no language)."""
        return 1

    @property
    def action_loop(self) -> ActionLoopKind:
        raise NotImplementedError

    def prefix_tokens(self, cameras: int) -> int:
        raise NotImplementedError

    def suffix_tokens(self, chunk: int) -> int:
        """Tokens the action head processes per call."""
        raise NotImplementedError

    @property
    def summary(self) -> tuple[str, str]:
        """(backbone, action head) in a few words, for ``vlabench models``."""
        raise NotImplementedError
