"""The correctness gate: a run's action chunk against the fp32 eager torch reference on the same inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from vlabench.measure.action_loops import make_sampler
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.models.replicas import Observation, build_replica
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision


class Tolerance(BaseModel):
    """Bounds on the denoised displacement (actions - initial noise): the part of the chunk the model computed.

    Comparing whole chunks would let a broken backend pass, since the shared noise dominates them."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    max_relative_error: float = Field(description="max |error| / max |reference displacement|")
    min_cosine: float


TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(max_relative_error=1e-3, min_cosine=0.99999),
    "fp16": Tolerance(max_relative_error=5e-2, min_cosine=0.999),
    "bf16": Tolerance(max_relative_error=0.25, min_cosine=0.99),
    "int8": Tolerance(max_relative_error=0.25, min_cosine=0.99),
    "int4": Tolerance(max_relative_error=0.5, min_cosine=0.95),
}
"""Per-precision bounds (rationale and measurements: docs/precision.md, "Correctness tolerances per precision").
int8 gets bf16's bounds: an int8 code and a bf16 mantissa both carry about 8 significant bits, and per-channel
scales keep int8 weights within one step of 1/254 of each channel's range. int4 steps are 16× coarser (1/14 of a
group's range), so its bounds are wider; a corrupted or mis-scaled quantization still lands far outside them
(tests/test_openvino_precision.py checks both sides)."""


class Correctness(BaseModel):
    """The gate's verdict. Errors are NaN when the backend returned NaN actions (written as "NaN" in result files);
    None: not recorded (files written before non-finite values were kept stored NaN as null)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    reference: str = "torch eager fp32, same seeded weights, observation and noise"
    max_abs_error: float | None = Field(description="max |actions - reference actions|")
    cosine: float | None = Field(description="cosine similarity of the two action chunks")
    relative_error: float | None = Field(description="max |displacement error| / max |reference displacement| (gated)")
    displacement_cosine: float | None = Field(description="cosine of the two displacements (gated)")
    tolerance: Tolerance
    passed: bool


def needs_reference(reference_backend: bool, precision: str) -> bool:
    """Every run except the reference itself (the reference backend at the reference precision) is gated."""
    return not (reference_backend and precision == Precision.REFERENCE)


@torch.no_grad()
def reference_actions(
    spec: ModelSpec,
    workload: Workload,
    seed: int,
    obs: Observation,
    noise: Tensor,
    device: torch.device,
    schedule: DPCacheSchedule | None = None,
) -> Tensor:
    """The fp32 eager action chunk for (obs, noise), with TF32 off, under the run's DP-Cache schedule if any (a
    backend is judged on computing what it was asked); the replica is freed before returning."""
    model = build_replica(spec, seed, torch.float32, device)
    sampler = make_sampler(spec, workload, device, schedule)
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=False):
            actions = sampler.sample(model, model.prefix(obs), noise).float().cpu()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return actions


def compare(actions: Tensor, reference: Tensor, noise: Tensor, precision: str) -> Correctness:
    actions, reference, noise = actions.float().cpu(), reference.float().cpu(), noise.float().cpu()
    moved, expected = actions - noise, reference - noise
    scale = float(expected.abs().max())
    relative = float((moved - expected).abs().max()) / scale if scale > 0 else float("inf")
    displacement_cosine = float(F.cosine_similarity(moved.flatten(), expected.flatten(), dim=0))
    tolerance = TOLERANCES[precision]
    passed = relative <= tolerance.max_relative_error and displacement_cosine >= tolerance.min_cosine
    return Correctness(
        max_abs_error=float((actions - reference).abs().max()),
        cosine=float(F.cosine_similarity(actions.flatten(), reference.flatten(), dim=0)),
        relative_error=relative,
        displacement_cosine=displacement_cosine,
        tolerance=tolerance,
        passed=bool(passed and torch.isfinite(actions).all()),
    )
