"""The workload knobs of one run (cameras, steps, chunk, ...) and the synthetic observations that feed it."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from vlabench.replicas import Observation
from vlabench.specs import ModelSpec


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    batch: int = Field(default=1, gt=0)
    cameras: int = Field(gt=0)
    language_tokens: int = Field(gt=0)
    language_valid_tokens: int = Field(gt=0, description="instruction tokens before padding")
    chunk: int = Field(gt=0)
    steps: int = Field(gt=0)
    actions_per_chunk: int = Field(gt=0)
    action_dim: int = Field(gt=0)
    state_dim: int = Field(gt=0)
    image_size: int = Field(gt=0)
    prefix_tokens: int = Field(gt=0)
    suffix_tokens: int = Field(gt=0)

    @classmethod
    def from_spec(
        cls,
        spec: ModelSpec,
        cameras: int | None = None,
        steps: int | None = None,
        chunk: int | None = None,
        actions_per_chunk: int | None = None,
    ) -> Workload:
        """Spec defaults overridden by the given knobs; a quarter of the instruction is padding, as in practice."""
        action = spec.action
        cameras = cameras or spec.cameras
        chunk = chunk or action.chunk
        actions_per_chunk = actions_per_chunk or min(action.actions_per_chunk, chunk)
        state_token = int(action.state_placement == "prefix_token")
        return cls(
            cameras=cameras,
            language_tokens=spec.language_tokens,
            language_valid_tokens=max(1, spec.language_tokens - spec.language_tokens // 4),
            chunk=chunk,
            steps=steps or action.steps,
            actions_per_chunk=actions_per_chunk,
            action_dim=action.action_dim,
            state_dim=action.state_dim,
            image_size=spec.vision.image_size,
            prefix_tokens=cameras * spec.vision.tokens_per_camera + spec.language_tokens + state_token,
            suffix_tokens=chunk + int(action.state_placement == "suffix_token"),
        )


def synthetic_observation(
    spec: ModelSpec, workload: Workload, seed: int, dtype: torch.dtype, device: torch.device
) -> Observation:
    """Seeded images in [-1, 1], random instruction token ids with trailing padding, and a random state."""
    generator = torch.Generator().manual_seed(seed)
    size, batch = workload.image_size, workload.batch
    images = torch.rand(batch, workload.cameras, 3, size, size, generator=generator) * 2 - 1
    tokens = torch.randint(0, spec.llm.vocab, (batch, workload.language_tokens), generator=generator)
    mask = (torch.arange(workload.language_tokens) < workload.language_valid_tokens).expand(batch, -1)
    state = torch.randn(batch, workload.state_dim, generator=generator)
    return Observation(
        images=images.to(device=device, dtype=dtype),
        language_tokens=tokens.to(device),
        language_mask=mask.to(device),
        state=state.to(device=device, dtype=dtype),
    )


def initial_noise(workload: Workload, seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(workload.batch, workload.chunk, workload.action_dim, generator=generator)
    return noise.to(device=device, dtype=dtype)
