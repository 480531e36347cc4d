"""The correctness gate: a run's action chunk against the eager torch reference on the same inputs.

The reference is fp32 whenever it fits in memory. When it does not (``commands/run/reference.py``), it is the most
precise torch build that does (bf16, else int8), and every error is then relative to that reference, not to the
exact fp32 path: the gate applies the looser of the measured and the reference precision's tolerances and the
verdict names the reference (``Correctness.reference_precision``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.models.replicas import Observation, build_replica
from vlabench.models.specs import ModelSpec, OpenVLASpec
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
    "fp8": Tolerance(max_relative_error=0.25, min_cosine=0.99),
    "int4": Tolerance(max_relative_error=0.5, min_cosine=0.95),
}
"""Per-precision bounds (rationale and measurements: docs/precision.md, "Correctness tolerances per precision").
int8 gets bf16's bounds: an int8 code and a bf16 mantissa both carry about 8 significant bits, and per-channel
scales keep int8 weights within one step of 1/254 of each channel's range. int4 steps are 16× coarser (1/14 of a
group's range), so its bounds are wider; a corrupted or mis-scaled quantization still lands far outside them
(tests/integration/backends/test_openvino_precision.py checks both sides)."""


class Correctness(BaseModel):
    """The gate's verdict. Errors are NaN when the backend returned NaN actions (written as "NaN" in result files);
    None: not recorded (files written before non-finite values were kept stored NaN as null)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    reference: str = "torch eager fp32, same seeded weights, observation and noise"
    reference_precision: str = Field(
        default=Precision.REFERENCE, description="the reference's precision: fp32 unless fp32 did not fit in memory"
    )
    max_abs_error: float | None = Field(description="max |actions - reference actions|")
    cosine: float | None = Field(description="cosine similarity of the two action chunks")
    relative_error: float | None = Field(description="max |displacement error| / max |reference displacement| (gated)")
    displacement_cosine: float | None = Field(description="cosine of the two displacements (gated)")
    tolerance: Tolerance
    passed: bool
    token_agreement: float | None = Field(
        default=None, description="token models: share of action tokens equal to the reference's"
    )
    tokens_compared: int | None = Field(default=None, description="token models: action tokens compared")


def gate_tolerance(precision: str, reference_precision: str = Precision.REFERENCE) -> Tolerance:
    """The looser of the two precisions' tolerances: a non-fp32 reference carries its own precision's error (for
    the fp32 reference, exactly the measured precision's tolerance)."""
    measured, reference = TOLERANCES[precision], TOLERANCES[reference_precision]
    if reference_precision == Precision.REFERENCE:
        return measured
    return Tolerance(
        max_relative_error=max(measured.max_relative_error, reference.max_relative_error),
        min_cosine=min(measured.min_cosine, reference.min_cosine),
    )


def action_tokens(actions: Tensor, spec: ModelSpec) -> Tensor | None:
    """The action-token indices a token model decoded, recovered from its chunk (OpenVLA: bin k of ``bins`` is the
    k-th uniform value in [-1, 1], exact after rounding even in bf16); None for other models (π0-FAST's DCT
    coefficients are not recovered)."""
    if not isinstance(spec, OpenVLASpec) or spec.parallel:
        return None
    bins = spec.action.bins
    return torch.round((actions.float() + 1) / 2 * (bins - 1)).long().clamp(0, bins - 1)


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
    precision: str = Precision.REFERENCE,
    build: Callable[[], nn.Module] | None = None,
) -> Tensor:
    """The eager action chunk for (obs, noise) at ``precision`` (fp32 unless it does not fit), with TF32 off, under
    the run's DP-Cache schedule if any (a backend is judged on computing what it was asked); the replica is freed
    before returning. A reduced float reference is built module by module (never whole at fp32); a quantized one
    needs ``build`` (the torch backend's quantized build)."""
    if build is not None:
        model = build()
    elif precision == Precision.REFERENCE:
        model = build_replica(spec, seed, torch.float32, device)
    elif precision in Precision.DTYPES:
        model = build_replica(spec, seed, Precision.DTYPES[precision], device, transform=lambda name, module: None)
    else:
        raise ValueError(f"a {precision} reference needs the quantized build passed as ``build``")
    loop = make_action_loop(spec, workload, device, schedule)
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=False):
            actions = loop.sample(model, model.prefix(obs), noise).float().cpu()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return actions


def compare(
    actions: Tensor,
    reference: Tensor,
    noise: Tensor,
    precision: str,
    reference_precision: str = Precision.REFERENCE,
    spec: ModelSpec | None = None,
    reference_note: str = "",
) -> Correctness:
    """The verdict on ``actions`` against ``reference`` (computed at ``reference_precision``, for ``reference_note``
    reasons); token models (``spec``) also get their token agreement."""
    actions, reference, noise = actions.float().cpu(), reference.float().cpu(), noise.float().cpu()
    moved, expected = actions - noise, reference - noise
    scale = float(expected.abs().max())
    relative = float((moved - expected).abs().max()) / scale if scale > 0 else float("inf")
    displacement_cosine = float(F.cosine_similarity(moved.flatten(), expected.flatten(), dim=0))
    tolerance = gate_tolerance(precision, reference_precision)
    passed = relative <= tolerance.max_relative_error and displacement_cosine >= tolerance.min_cosine
    tokens = action_tokens(actions, spec) if spec is not None else None
    expected_tokens = action_tokens(reference, spec) if tokens is not None else None
    described = {}
    if reference_precision != Precision.REFERENCE:
        described["reference"] = (
            f"torch eager {reference_precision} ({reference_note or 'fp32 did not fit in memory'}), same seeded "
            f"weights, observation and noise; errors are relative to this reference, not to fp32"
        )
    return Correctness(
        **described,
        reference_precision=reference_precision,
        max_abs_error=float((actions - reference).abs().max()),
        cosine=float(F.cosine_similarity(actions.flatten(), reference.flatten(), dim=0)),
        relative_error=relative,
        displacement_cosine=displacement_cosine,
        tolerance=tolerance,
        passed=bool(passed and torch.isfinite(actions).all()),
        token_agreement=None if tokens is None else float((tokens == expected_tokens).float().mean()),
        tokens_compared=None if tokens is None else tokens.numel(),
    )
