"""The correctness gate's reference for a run: fp32 eager torch when it fits in the target's available memory, else
the most precise torch build that does (bf16, then int8), with the reason recorded.

``execute_many`` computes every reference action chunk (and frees its replica) before any measured policy is
prepared, so a reference and a measured model are never resident at once: each is checked against the available
memory on its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from vlabench.analysis import memory
from vlabench.errors import InsufficientMemoryError
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision

CANDIDATES = (Precision.REFERENCE, "bf16", "int8")
"""Reference precisions, most precise first; int8 through the torch backend's quantized build."""
GIB = 1024**3


@dataclass(frozen=True)
class ReferenceChoice:
    """The precision the gate's reference runs at, and why (empty when it is fp32, the exact reference)."""

    precision: str = Precision.REFERENCE
    reason: str = ""


def reference_candidates(device: torch.device) -> tuple[str, ...]:
    """``CANDIDATES`` the torch backend builds on ``device`` here (int8 needs torchao)."""
    from vlabench.backends.torch.quantize import quantized_precisions

    quantized = quantized_precisions(device)
    return tuple(p for p in CANDIDATES if not Precision.is_quantized(p) or p in quantized)


def choose_reference(spec: ModelSpec, workload: Workload, device: torch.device, iterations: int) -> ReferenceChoice:
    """fp32 when its torch footprint fits the available memory, else the first of ``reference_candidates`` that
    does; InsufficientMemoryError naming each candidate's need when none fits."""
    available = memory.available_bytes(device)
    needs: dict[str, int] = {}
    for precision in reference_candidates(device):
        needs[precision] = memory.estimate_footprint(spec, workload, precision, "torch", iterations).total_bytes
        if needs[precision] <= available:
            break
    else:
        shown = ", ".join(f"{p} {need / GIB:.3g} GiB" for p, need in needs.items())
        raise InsufficientMemoryError(
            f"{spec.name}: no correctness reference fits on {device}: the torch reference needs about {shown}, but "
            f"only {available / GIB:.3g} GiB is available"
        )
    if precision == Precision.REFERENCE:
        return ReferenceChoice()
    refused = ", ".join(f"{p} needs about {needs[p] / GIB:.3g} GiB" for p in needs if p != precision)
    return ReferenceChoice(
        precision,
        f"{refused}, only {available / GIB:.3g} GiB is available; {precision} needs about "
        f"{needs[precision] / GIB:.3g} GiB",
    )


def reference_builder(
    spec: ModelSpec, seed: int, precision: str, device: torch.device
) -> Callable[[], nn.Module] | None:
    """What builds a quantized reference (the torch backend's layer-by-layer build); None for a float one, which
    ``reference_actions`` builds itself."""
    from vlabench.backends.torch.quantize import build_quantized_replica

    if not Precision.is_quantized(precision):
        return None

    return lambda: build_quantized_replica(spec, seed, precision, device)[0]
