"""The input pipeline a deployed policy runs around the model, as lerobot's processors do: tokenize the instruction,
bring camera frames (uint8, height × width × 3, as a camera driver returns them) to the model's resolution and value
range, normalize the robot state with the dataset's statistics; afterwards, unnormalize the actions.

The checkpoints' tokenizer files cannot be downloaded here, so the tokenizer is a BPE model of the same library the
checkpoints' tokenizers use (Hugging Face ``tokenizers``), trained on :data:`INSTRUCTIONS` with at most the model's
vocabulary: its per-call cost follows the algorithm (pre-tokenize, merge, pad, truncate), not the merges learned.
Dataset statistics are seeded like the weights."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from vlabench.models.replicas import Observation
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload

CAMERA_FRAME = (480, 640)
"""A camera frame's height and width (the resolution lerobot's recorded robot datasets mostly use)."""
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INSTRUCTIONS = (
    "pick up the red cube and place it in the bowl",
    "open the top drawer of the cabinet",
    "put the black bowl on the plate",
    "push the T-shaped block onto the target",
    "stack the green block on top of the yellow block",
    "turn on the stove and put the moka pot on it",
    "put both the alphabet soup and the tomato sauce in the basket",
    "close the microwave door",
    "pick up the book and place it in the back compartment of the caddy",
    "insert the peg into the hole",
    "fold the towel in half",
    "move the sponge to the left of the sink",
)
"""The tokenizer's training corpus, and the instructions the pipeline is timed on (one per seeded input)."""


@dataclass
class RawObservation:
    """What a robot hands the policy: camera frames, the instruction, the state in the robot's own units."""

    frames: Tensor  # (B, cameras × frames, height, width, 3) uint8, on the host
    instruction: list[str]  # one per batch row
    state: Tensor  # (B, frames × state_dim) float32, on the host


@lru_cache(maxsize=8)
def trained_tokenizer(vocab: int, length: int) -> Any:  # a tokenizers.Tokenizer
    """A BPE tokenizer trained on :data:`INSTRUCTIONS` with at most ``vocab`` ids, padding and truncating to
    ``length`` tokens (lerobot pads SmolVLA's and pi0's prompts to a fixed length)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["[PAD]", "[UNK]"], show_progress=False)
    tokenizer.train_from_iterator(INSTRUCTIONS, trainer)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=length)
    tokenizer.enable_truncation(max_length=length)
    return tokenizer


@dataclass(frozen=True)
class Normalization:
    """A dataset's statistics: the state is normalized with them, the actions unnormalized (lerobot's MEAN_STD)."""

    state_mean: Tensor
    state_std: Tensor
    action_mean: Tensor
    action_std: Tensor


class InputPipeline:
    """One model's pre- and postprocessing on one target, at the run's dtype: seeded statistics and the BPE
    tokenizer above, or a trained checkpoint's own (``normalization``, ``tokenizer``)."""

    def __init__(
        self,
        spec: ModelSpec,
        workload: Workload,
        seed: int,
        dtype: torch.dtype,
        device: torch.device,
        normalization: Normalization | None = None,
        tokenizer: Any = None,  # a tokenizers.Tokenizer padding and truncating to the workload's length
    ):
        self.workload, self.dtype, self.device = workload, dtype, device
        self.size = (workload.image_size, workload.image_width or workload.image_size)
        self.resize, self.range = spec.pixels  # the family's rule (its spec class's)
        generator = torch.Generator().manual_seed(seed + 7919)
        states, actions = workload.frames * workload.state_dim, workload.action_dim

        def stats(width: int) -> tuple[Tensor, Tensor]:
            mean = torch.randn(width, generator=generator)
            std = torch.rand(width, generator=generator) + 0.5
            return mean.to(device), std.to(device)

        if normalization is None:
            self.state_mean, self.state_std = stats(states)
            self.action_mean, self.action_std = stats(actions)
        else:
            self.state_mean, self.state_std = normalization.state_mean.to(device), normalization.state_std.to(device)
            self.action_mean = normalization.action_mean.to(device)
            self.action_std = normalization.action_std.to(device)
        length = workload.language_tokens
        if tokenizer is None and length:
            tokenizer = trained_tokenizer(min(spec.token_vocab, 1024), length)
        self.tokenizer = tokenizer if length else None

    def preprocess(self, raw: RawObservation) -> Observation:
        """Tokenize on the host; frames and state to the target, then resize, rescale and normalize there."""
        batch = raw.frames.shape[0]
        if self.tokenizer is not None:
            encoded = self.tokenizer.encode_batch(raw.instruction)
            tokens = torch.tensor([e.ids for e in encoded], dtype=torch.long).to(self.device)
            mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.bool).to(self.device)
        else:
            tokens = torch.zeros(batch, 0, dtype=torch.long, device=self.device)
            mask = torch.zeros(batch, 0, dtype=torch.bool, device=self.device)
        frames = raw.frames.to(self.device, non_blocking=True)
        images = self.pixels(frames.flatten(0, 1).permute(0, 3, 1, 2).float().div_(255.0))
        state = (raw.state.to(self.device) - self.state_mean) / self.state_std
        return Observation(  # contiguous, as synthetic observations are: a compiled policy's guards see one layout
            images=images.unflatten(0, frames.shape[:2]).to(self.dtype).contiguous(),
            language_tokens=tokens,
            language_mask=mask,
            state=state.to(self.dtype),
        )

    def pixels(self, images: Tensor) -> Tensor:
        """(N, 3, h, w) in [0, 1] → (N, 3, H, W) in the vision tower's range."""
        height, width = self.size
        if images.shape[-2:] != (height, width):
            if self.resize == "pad":  # keep the aspect ratio, pad the rest (lerobot's resize_with_pad)
                scale = min(height / images.shape[-2], width / images.shape[-1])
                inner = (max(1, round(images.shape[-2] * scale)), max(1, round(images.shape[-1] * scale)))
                images = F.interpolate(images, size=inner, mode="bilinear", align_corners=False, antialias=True)
                images = F.pad(images, (0, width - inner[1], 0, height - inner[0]))
            else:
                images = F.interpolate(
                    images, size=(height, width), mode="bilinear", align_corners=False, antialias=True
                )
        if self.range == "symmetric":
            return images.mul_(2.0).sub_(1.0)
        mean = torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1)
        return images.sub_(mean).div_(std)

    def postprocess(self, actions: Tensor) -> Tensor:
        """Normalized actions back to the robot's units."""
        return actions.float() * self.action_std + self.action_mean


def raw_observation(workload: Workload, seed: int) -> RawObservation:
    """Seeded camera frames at :data:`CAMERA_FRAME`, an instruction from :data:`INSTRUCTIONS`, a state in robot
    units, on the host."""
    generator = torch.Generator().manual_seed(seed)
    batch, views = workload.batch, workload.cameras * workload.frames
    frames = torch.randint(0, 256, (batch, views, *CAMERA_FRAME, 3), dtype=torch.uint8, generator=generator)
    state = torch.randn(batch, workload.frames * workload.state_dim, generator=generator) * 3.0
    instruction = [INSTRUCTIONS[(seed + row) % len(INSTRUCTIONS)] for row in range(batch)]
    return RawObservation(frames=frames, instruction=instruction, state=state)


def stack_rows(rows: list[RawObservation], batch: int) -> RawObservation:
    """Robots' single-row observations as one batch of ``batch`` rows, the last row repeated as padding (a graph
    exported for a fixed batch takes only that batch)."""
    if not 0 < len(rows) <= batch:
        raise ValueError(f"{len(rows)} observations do not fit a batch of {batch}")
    padded = rows + [rows[-1]] * (batch - len(rows))
    return RawObservation(
        frames=torch.cat([row.frames for row in padded]),
        instruction=[text for row in padded for text in row.instruction],
        state=torch.cat([row.state for row in padded]),
    )
