"""The workload knobs of one run (cameras, steps, chunk, ...) and the synthetic observations that feed it."""

from __future__ import annotations

import torch
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from vlabench.errors import InputError
from vlabench.models.replicas import Observation
from vlabench.models.spec_base import ActionLoopKind
from vlabench.models.specs import ModelSpec


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    batch: int = Field(default=1, gt=0)
    cameras: int = Field(gt=0)
    language_tokens: int = Field(ge=0)
    language_valid_tokens: int = Field(ge=0, description="instruction tokens before padding")
    chunk: int = Field(gt=0)
    steps: int = Field(gt=0)
    actions_per_chunk: int = Field(gt=0)
    action_dim: int = Field(gt=0)
    state_dim: int = Field(ge=0)
    image_size: int = Field(gt=0, description="image height")
    image_width: int | None = Field(default=None, gt=0, description="None: square images")
    frames: int = Field(default=1, gt=0, description="observation history: images and states per camera")
    prefix_tokens: int = Field(gt=0)
    suffix_tokens: int = Field(gt=0)
    action_loop: ActionLoopKind = Field(
        default="euler",
        validation_alias=AliasChoices("action_loop", "sampler"),  # "sampler" in results before schema 1.4
        description="how the action head is called: see vlabench.measure.action_loops",
    )

    @property
    def noisy(self) -> bool:
        """Whether the action loop starts from noise (flow and diffusion heads) rather than from nothing."""
        return self.action_loop in ("euler", "ddpm", "ddim")

    @classmethod
    def from_spec(
        cls,
        spec: ModelSpec,
        cameras: int | None = None,
        steps: int | None = None,
        chunk: int | None = None,
        actions_per_chunk: int | None = None,
        batch: int = 1,
    ) -> Workload:
        """Spec defaults overridden by the given knobs; a quarter of the instruction is padding, as in practice."""
        action = spec.action
        cameras = cameras or spec.cameras
        chunk = chunk or action.chunk
        if actions_per_chunk is not None and actions_per_chunk > chunk:
            raise InputError(
                f"--actions-per-chunk {actions_per_chunk} is more than the chunk length {chunk} "
                f"({spec.name}'s chunk unless --chunk sets it): a chunk holds only {chunk} actions"
            )
        actions_per_chunk = actions_per_chunk or min(action.actions_per_chunk, chunk)
        height, width = spec.image_shape
        return cls(
            batch=batch,
            cameras=cameras,
            language_tokens=spec.language_tokens,
            language_valid_tokens=spec.language_tokens - spec.language_tokens // 4,
            chunk=chunk,
            steps=steps or action.steps,
            actions_per_chunk=actions_per_chunk,
            action_dim=action.action_dim,
            state_dim=action.state_dim,
            image_size=height,
            image_width=None if width == height else width,
            frames=spec.frames,
            prefix_tokens=spec.prefix_tokens(cameras),
            suffix_tokens=spec.suffix_tokens(chunk),
            action_loop=spec.action_loop,
        )


def synthetic_observation(
    spec: ModelSpec, workload: Workload, seed: int, dtype: torch.dtype, device: torch.device
) -> Observation:
    """Seeded images in [-1, 1] (cameras × frames of them, frame-major), random instruction token ids with trailing
    padding, and a random state per frame."""
    generator = torch.Generator().manual_seed(seed)
    height, width, batch = workload.image_size, workload.image_width or workload.image_size, workload.batch
    images = torch.rand(batch, workload.cameras * workload.frames, 3, height, width, generator=generator) * 2 - 1
    tokens = torch.randint(0, spec.token_vocab, (batch, workload.language_tokens), generator=generator)
    mask = (torch.arange(workload.language_tokens) < workload.language_valid_tokens).repeat(batch, 1)
    state = torch.randn(batch, workload.frames * workload.state_dim, generator=generator)
    return Observation(
        images=images.to(device=device, dtype=dtype),
        language_tokens=tokens.to(device),
        language_mask=mask.to(device),
        state=state.to(device=device, dtype=dtype),
    )


def initial_noise(workload: Workload, seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The chunk the action loop starts from: seeded Gaussian noise, or zeros for heads that use none."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(workload.batch, workload.chunk, workload.action_dim, generator=generator)
    if not workload.noisy:
        noise = torch.zeros_like(noise)
    return noise.to(device=device, dtype=dtype)
