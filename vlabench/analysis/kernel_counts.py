"""Kernels launched per phase, counted from the traced graph of a replica (meta device: nothing is allocated).

Two counting schemes, one per kind of software stack:

- ``eager``: every aten operator that is not a pure view (metadata only) is one kernel launch, as in eager PyTorch;
- ``fused``: every matrix product, convolution or attention operator (``torch.utils.flop_counter`` has a formula
  for it) is one kernel, and each run of other operators between two of them is fused into one kernel, as graph
  compilers (torch.compile/Inductor, XLA, TensorRT, ONNX Runtime and OpenVINO graph optimizations) fuse
  elementwise chains, norms and softmax into the neighbouring kernels or into one generated kernel.

The action phase launches ``steps`` times the kernels of one step.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from vlabench.analysis.flops_traced import VIEWS
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import ModelPhase, Precision

Scheme = Literal["eager", "fused"]
SCHEMES: tuple[Scheme, ...] = ("eager", "fused")

COPYING_VIEWS = {torch.ops.aten._to_copy, torch.ops.aten.clone, torch.ops.aten.contiguous, torch.ops.aten.reshape}
METADATA_ONLY = (VIEWS - COPYING_VIEWS) | {
    torch.ops.aten.split,
    torch.ops.aten.split_with_sizes,
    torch.ops.aten.unbind,
    torch.ops.aten.as_strided,
    torch.ops.aten.lift_fresh,
    torch.ops.aten.empty,
}
"""Operators that launch no kernel: the traced views that never copy, and allocation or splitting."""


class KernelCounts(BaseModel):
    """Kernels per phase (``denoise_step`` is one step) under both schemes."""

    model_config = ConfigDict(frozen=True)

    eager: dict[ModelPhase, int]
    fused: dict[ModelPhase, int]

    def per_phase(self, scheme: Scheme, steps: int) -> dict[str, int]:
        """Kernels of vision, prefill, the whole action loop (``steps`` steps) and the sum, under ``scheme``."""
        counts = getattr(self, scheme)
        phases = {"vision": counts["vision"], "prefill": counts["prefill"], "action": counts["denoise_step"] * steps}
        return {**phases, "e2e": sum(phases.values())}


class _Counter(TorchDispatchMode):
    """Records, per phase, whether each dispatched operator is a GEMM-class anchor or another kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.phase: ModelPhase = "vision"
        self.kinds: dict[ModelPhase, list[bool]] = {"vision": [], "prefill": [], "denoise_step": []}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func._overloadpacket
        if packet not in METADATA_ONLY:
            self.kinds[self.phase].append(packet in flop_registry)
        return out


def fused_count(anchors: list[bool]) -> int:
    """One kernel per anchor (GEMM-class operator) plus one per run of other operators between anchors."""
    kernels, in_run = 0, False
    for anchor in anchors:
        if anchor:
            kernels, in_run = kernels + 1, False
        elif not in_run:
            kernels, in_run = kernels + 1, True
    return kernels


_COUNTED: dict[tuple[str, str, str], KernelCounts] = {}


def count_kernels(spec: ModelSpec, workload: Workload, precision: str) -> KernelCounts:
    """Kernels of the vision phase, the prefill and one action step; traced once per (spec, workload, precision)."""
    key = (spec.spec_hash, workload.model_dump_json(), precision)
    if key not in _COUNTED:
        kinds = _trace(spec, workload, precision)
        _COUNTED[key] = KernelCounts(
            eager={phase: len(ops) for phase, ops in kinds.items()},  # type: ignore[misc]
            fused={phase: fused_count(ops) for phase, ops in kinds.items()},  # type: ignore[misc]
        )
    return _COUNTED[key]


@torch.no_grad()
def _trace(spec: ModelSpec, workload: Workload, precision: str) -> dict[ModelPhase, list[bool]]:
    from vlabench.models.replicas import replica_class

    dtype, meta = Precision.dtype(precision), torch.device("meta")  # quantized: traced with fp32 activations
    with meta:
        model = replica_class(spec)(spec).to(dtype)
    obs = synthetic_observation(spec, workload, 0, dtype, torch.device("cpu"))
    obs = type(obs)(**{name: value.to(meta) for name, value in vars(obs).items()})
    noise = initial_noise(workload, 0, dtype, meta)
    counter = _Counter()
    with counter:
        tokens = model.embed_images(obs.images)
        counter.phase = "prefill"
        cache = model.prefill(obs, tokens)
        counter.phase = "denoise_step"
        if workload.action_loop == "greedy_decode":
            model.decode_step(torch.zeros(workload.batch, 1, dtype=torch.long, device=meta), cache)
        else:
            model.denoise_step(noise, torch.ones(workload.batch, device=meta), cache)
    return counter.kinds
