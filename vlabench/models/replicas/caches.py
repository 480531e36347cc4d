"""What phase 1 hands to phase 2: every family's prefix cache is a dataclass of tensors batched along one axis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import ClassVar, TypeVar

import torch
from torch import Tensor

CacheT = TypeVar("CacheT", bound="BatchedCache")


class BatchedCache:
    """A dataclass of tensors with the batch in dim 0, except the layer-major fields (batch in dim 1)."""

    LAYER_MAJOR: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def concat(cls: type[CacheT], caches: Sequence[CacheT]) -> CacheT:
        """One cache holding the batches of ``caches`` in order (fields that are None in all of them stay None)."""
        merged: dict[str, Tensor | None] = {}
        for field in fields(cls):  # type: ignore[arg-type]
            parts = [getattr(cache, field.name) for cache in caches]
            if all(part is None for part in parts):
                merged[field.name] = None
            elif all(isinstance(part, Tensor) for part in parts):
                merged[field.name] = torch.cat(parts, dim=1 if field.name in cls.LAYER_MAJOR else 0)
            else:
                raise TypeError(f"{cls.__name__}.{field.name} holds no tensor to concatenate along the batch")
        return cls(**merged)
