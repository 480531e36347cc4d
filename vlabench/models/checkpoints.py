"""Real weights from a local lerobot-format ``model.safetensors``, mapped onto a replica's parameter names.

Each replica class declares ``LEROBOT_RENAMES`` (lerobot key prefix → replica prefix, first match wins) and
``LEROBOT_IGNORED`` (prefixes of keys that are not replica weights, e.g. normalization statistics or modules the
replica does not hold). Loading is strict: a replica weight the file lacks, or a shape that differs, is an error
that lists them; keys the file has beyond the replica's are reported.
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import BaseModel, Field
from torch import nn

from vlabench.errors import InputError

WEIGHTS_FILE = "model.safetensors"
SHOWN = 8  # keys listed per problem in an error message


class CheckpointReport(BaseModel):
    path: str
    loaded: int = Field(description="replica tensors filled from the file")
    ignored: int = Field(description="file tensors skipped by the family's ignore list")
    unexpected: list[str] = Field(description="file tensors (lerobot names) with no replica counterpart")


def checkpoint_file(path: Path) -> Path:
    """``path`` itself, or the ``model.safetensors`` inside a lerobot ``pretrained_model`` folder."""
    file = path / WEIGHTS_FILE if path.is_dir() else path
    if not file.is_file():
        raise InputError(f"checkpoint {path}: no such file (expected a {WEIGHTS_FILE} or a folder holding one)")
    return file


def checkpoint_stamp(path: Path) -> str:
    """Identity of a checkpoint file without reading it: resolved path, size and modification time."""
    file = checkpoint_file(path).resolve()
    stat = file.stat()
    return f"{file}:{stat.st_size}:{stat.st_mtime_ns}"


def replica_name(key: str, renames: tuple[tuple[str, str], ...]) -> str | None:
    for source, target in renames:
        if key.startswith(source):
            return target + key[len(source) :]
    return None


def lerobot_name(key: str, renames: tuple[tuple[str, str], ...]) -> str:
    """The lerobot key a replica parameter is saved under (the first rule whose target prefix matches)."""
    for source, target in renames:
        if key.startswith(target):
            return source + key[len(target) :]
    raise KeyError(key)


def read_tensors(file: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"checkpoint {file}: not a readable safetensors file: {exc}") from None


@torch.no_grad()
def load_checkpoint(model: nn.Module, path: Path) -> CheckpointReport:
    """Fill ``model`` from a lerobot checkpoint (cast to the model's dtype); raises InputError on any gap."""
    file = checkpoint_file(path)
    renames = getattr(type(model), "LEROBOT_RENAMES", None)
    if renames is None:
        raise InputError(f"{type(model).__name__} has no lerobot key mapping: --checkpoint is not supported for it")
    ignored_prefixes = getattr(type(model), "LEROBOT_IGNORED", ())
    state = model.state_dict()
    mapped: dict[str, torch.Tensor] = {}
    unexpected, ignored = [], 0
    for key, tensor in read_tensors(file).items():
        if key.startswith(ignored_prefixes):
            ignored += 1
            continue
        name = replica_name(key, renames)
        if name is None or name not in state:
            unexpected.append(key)
            continue
        mapped[name] = tensor
    missing = [name for name in state if name not in mapped]
    mismatched = [
        f"{name}: file {tuple(tensor.shape)} vs replica {tuple(state[name].shape)}"
        for name, tensor in mapped.items()
        if tensor.shape != state[name].shape
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} replica weight(s) missing from the file: {', '.join(missing[:SHOWN])}")
    if mismatched:
        problems.append(f"{len(mismatched)} shape mismatch(es): {'; '.join(mismatched[:SHOWN])}")
    if problems:
        hint = f"; {len(unexpected)} file key(s) unused, e.g. {', '.join(unexpected[:SHOWN])}" if unexpected else ""
        raise InputError(f"checkpoint {file} does not fit {type(model).__name__}: " + "; ".join(problems) + hint)
    for name, tensor in mapped.items():
        state[name].copy_(tensor.to(state[name].dtype))
    return CheckpointReport(path=str(file), loaded=len(mapped), ignored=ignored, unexpected=unexpected)
