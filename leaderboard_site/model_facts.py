"""What a model page says about a spec, for every family: the ``vlabench models`` summary (backbone, action head),
the action loop and chunk, the observation, and each architecture block the family's spec holds."""

from __future__ import annotations

from typing import Any

from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload

IDENTITY_FIELDS = frozenset(
    {
        "name",
        "display_name",
        "description",
        "architecture_sources",
        "reference",
        "variant_of",
        "cameras",
        "language_tokens",
        "checkpoint",
        "trained",
        "family",
    }
)
"""``SpecBase`` fields shown elsewhere on the page (or not at all): everything else is an architecture block."""

BLOCK_LABELS = {
    "vision": "vision tower",
    "towers": "vision towers",
    "llm": "language model",
    "expert": "action expert",
    "adapter": "VL self-attention adapter",
    "dit": "action DiT",
    "head": "embodiment heads",
    "backbone": "image backbone",
    "transformer": "transformer",
    "unet": "1-D U-Net",
    "keypoints": "spatial-softmax keypoints per camera",
    "observation_frames": "observation frames",
    "action": "action head",
}

SAMPLER_LABELS = {
    "euler": "flow matching, Euler integration",
    "ddpm": "DDPM denoising",
    "ddim": "DDIM denoising",
    "single_pass": "one forward pass",
    "greedy_decode": "greedy autoregressive decoding",
}


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def model_facts(spec: ModelSpec) -> dict[str, Any]:
    """Plain strings and dumps (no spec attribute is looked up in the template, so no family lacks one)."""
    workload = Workload.from_spec(spec)
    backbone, action_head = spec.summary
    height, width = spec.image_shape
    steps = workload.steps
    if workload.action_loop in ("euler", "ddpm", "ddim"):
        calls = _plural(steps, "denoising step")
    elif workload.action_loop == "greedy_decode":
        calls = _plural(steps, "decode step")
    else:
        calls = "one call"
    state = _plural(workload.state_dim, "dim") if workload.state_dim else "none (the policy reads no state)"
    language = _plural(workload.language_tokens, "language token") if workload.language_tokens else "no language input"
    frames = f" × {_plural(workload.frames, 'frame')}" if workload.frames > 1 else ""
    observation = (
        f"{_plural(workload.cameras, 'camera')}{frames} at {height}×{width}, "
        f"{_plural(spec.tokens_per_camera, 'token')} per camera, {language} → "
        f"{_plural(workload.prefix_tokens, 'prefix token')}"
    )
    blocks = [
        (BLOCK_LABELS.get(name, name.replace("_", " ")), _dump(getattr(spec, name)))
        for name in type(spec).model_fields
        if name not in IDENTITY_FIELDS
    ]
    return {
        "backbone": backbone,
        "action_head": action_head,
        "action_loop": f"{SAMPLER_LABELS.get(workload.action_loop, workload.action_loop)}: {calls} per chunk",
        "chunk": (
            f"{_plural(workload.chunk, 'action')} of {workload.action_dim} dims per chunk, "
            f"{workload.actions_per_chunk} executed"
        ),
        "state": state,
        "observation": observation,
        "blocks": blocks,
    }


def _dump(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_dump(item) for item in value]
    return value.model_dump() if hasattr(value, "model_dump") else value
