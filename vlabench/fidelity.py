"""Open-loop fidelity: how far an optimized action chunk is from the exact path's on the same inputs and noise."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from torch import Tensor


class ActionError(BaseModel):
    """Errors of a chunk against the exact chunk; ``relative`` is over the exact denoised displacement."""

    max_abs: float
    rmse: float
    cosine: float = Field(description="cosine similarity of the two chunks")
    relative: float = Field(description="max |error| / max |exact actions - noise|")
    samples: int = 1


def action_error(actions: Tensor, exact: Tensor, noise: Tensor) -> ActionError:
    """Errors over a batch of chunks (each row one observation); the worst row for max and relative errors."""
    actions, exact, noise = actions.float().cpu(), exact.float().cpu(), noise.float().cpu()
    difference = actions - exact
    scale = (exact - noise).abs().flatten(1).amax(1).clamp_min(1e-12)
    cosine = F.cosine_similarity(actions.flatten(1), exact.flatten(1), dim=1)
    return ActionError(
        max_abs=float(difference.abs().max()),
        rmse=float(difference.pow(2).mean().sqrt()),
        cosine=float(cosine.mean()),
        relative=float((difference.abs().flatten(1).amax(1) / scale).max()),
        samples=int(actions.shape[0]),
    )


def stacked(chunks: list[Tensor]) -> Tensor:
    return torch.cat([chunk.float().cpu() for chunk in chunks], dim=0)
