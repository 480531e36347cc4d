"""Real weights from a local lerobot-format ``model.safetensors``, mapped onto a replica's parameter names.

Each replica class declares ``LEROBOT_RENAMES`` (lerobot key prefix → replica prefix, first match wins) and
``LEROBOT_IGNORED`` (prefixes of keys that are not replica weights, e.g. normalization statistics or modules the
replica does not hold), and may declare ``LEROBOT_TIED`` (replica weight, lerobot key): a weight tied to another
module's, which lerobot's ``save_pretrained`` (``safetensors.torch.save_model``) writes once, under the
alphabetically first of the tied names. The tied key fills the weight when the file lacks the weight's own key and
is a duplicate (counted as ignored) otherwise. Loading is strict: a replica weight the file lacks, or a shape that
differs, is an error that lists them; keys the file has beyond the replica's are reported.

The file is read header first and then one tensor at a time, so loading holds the replica plus one tensor.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import BaseModel, Field
from torch import nn

from vlabench.errors import InputError

WEIGHTS_FILE = "model.safetensors"
SHOWN = 8  # keys listed per problem in an error message

Renames = tuple[tuple[str, str], ...]


class CheckpointReport(BaseModel):
    path: str
    loaded: int = Field(description="replica tensors filled from the file")
    ignored: int = Field(description="file tensors skipped by the family's ignore list (or tied duplicates)")
    unexpected: list[str] = Field(description="file tensors (lerobot names) with no replica counterpart")


@dataclass
class KeyMatch:
    """How a file's tensors (names and shapes only) fall onto a replica's state dict."""

    sources: dict[str, str] = field(default_factory=dict)  # replica name -> file key it is filled from
    ignored: list[str] = field(default_factory=list)  # file keys skipped: ignore list or tied duplicate
    unexpected: list[str] = field(default_factory=list)  # file keys with no replica counterpart
    missing: list[str] = field(default_factory=list)  # replica names no file key fills
    mismatched: list[str] = field(default_factory=list)  # "name: file (..) vs replica (..)"

    def problems(self) -> list[str]:
        problems = []
        if self.missing:
            shown = ", ".join(self.missing[:SHOWN])
            problems.append(f"{len(self.missing)} replica weight(s) missing from the file: {shown}")
        if self.mismatched:
            problems.append(f"{len(self.mismatched)} shape mismatch(es): {'; '.join(self.mismatched[:SHOWN])}")
        return problems


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


def replica_name(key: str, renames: Renames) -> str | None:
    for source, target in renames:
        if key.startswith(source):
            return target + key[len(source) :]
    return None


def lerobot_name(key: str, renames: Renames) -> str:
    """The lerobot key a replica parameter is saved under (the first rule whose target prefix matches)."""
    for source, target in renames:
        if key.startswith(target):
            return source + key[len(target) :]
    raise KeyError(key)


def match_keys(model: nn.Module, file_shapes: dict[str, tuple[int, ...]]) -> KeyMatch:
    """Map a file's keys onto ``model``'s state dict by the class's rules; ``model`` may live on the meta device."""
    cls = type(model)
    renames: Renames | None = getattr(cls, "LEROBOT_RENAMES", None)
    if renames is None:
        raise InputError(f"{cls.__name__} has no lerobot key mapping: --checkpoint is not supported for it")
    ignored_prefixes: tuple[str, ...] = getattr(cls, "LEROBOT_IGNORED", ())
    tied: Renames = getattr(cls, "LEROBOT_TIED", ())
    tied_keys = {key for _, key in tied}
    state = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    match = KeyMatch()
    for key in file_shapes:
        if key in tied_keys:
            continue
        if key.startswith(ignored_prefixes):
            match.ignored.append(key)
            continue
        name = replica_name(key, renames)
        if name is None or name not in state:
            match.unexpected.append(key)
            continue
        match.sources[name] = key
    for name, key in tied:
        if key not in file_shapes:
            continue
        if name in state and name not in match.sources:
            match.sources[name] = key
        elif key not in match.sources.values():
            match.ignored.append(key)
    match.missing = [name for name in state if name not in match.sources]
    match.mismatched = [
        f"{name}: file {file_shapes[key]} vs replica {state[name]}"
        for name, key in match.sources.items()
        if file_shapes[key] != state[name]
    ]
    return match


@contextmanager
def open_safetensors(file: Path):
    from safetensors import SafetensorError, safe_open

    try:
        handle = safe_open(str(file), framework="pt", device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"checkpoint {file}: not a readable safetensors file: {exc}") from None
    with handle:
        yield handle


def read_shapes(handle) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and shape, from the file's header (a ``safe_open`` handle is not iterable)."""
    return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}  # noqa: SIM118


@torch.no_grad()
def load_checkpoint(model: nn.Module, path: Path) -> CheckpointReport:
    """Fill ``model`` from a lerobot checkpoint (cast to the model's dtype); raises InputError on any gap."""
    file = checkpoint_file(path)
    if getattr(type(model), "LEROBOT_RENAMES", None) is None:
        raise InputError(f"{type(model).__name__} has no lerobot key mapping: --checkpoint is not supported for it")
    with open_safetensors(file) as handle:
        match = match_keys(model, read_shapes(handle))
        problems = match.problems()
        if problems:
            unexpected = match.unexpected
            hint = f"; {len(unexpected)} file key(s) unused, e.g. {', '.join(unexpected[:SHOWN])}" if unexpected else ""
            raise InputError(f"checkpoint {file} does not fit {type(model).__name__}: " + "; ".join(problems) + hint)
        state = model.state_dict()
        for name, key in match.sources.items():
            state[name].copy_(handle.get_tensor(key))
    return CheckpointReport(
        path=str(file), loaded=len(match.sources), ignored=len(match.ignored), unexpected=match.unexpected
    )
