"""The closed-loop policy at reduced precision: bf16, or int8/fp8/int4 through the torch backend's own quantizers.

Each precision's copy of the trained policy runs the exact loop on the same seeded episodes and noise as the fp32
policy (``success_rate``), so its success is what that scheme does to the task:

- ``bf16``: weights, buffers and activations in bf16; observations and noise enter in bf16 and the actions leave as
  fp32 for the environment (the sinusoidal time embedding is computed in fp32, then cast, as in the replicas).
- ``int8`` / ``fp8`` / ``int4``: ``vlabench.backends.torch.quantize.Quantizer`` on the CPU, the transform a
  ``--backend torch --precision int8|fp8|int4`` run applies to its replica, module by module: each Linear it takes
  is replaced, the ones it declines (a shape the int4 kernels refuse) stay fp32, and activations between layers
  stay fp32.

A precision that cannot run here (torchao missing, a kernel that refuses, no layer the scheme takes) raises
``UnavailableError`` with the reason, which ``vlabench fidelity`` reports as a skipped variant.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from vlabench.errors import InputError, UnavailableError, unknown_name
from vlabench.models.replicas import transform_modules
from vlabench.optimizations.closed_loop.evaluate import EpisodeStats, cycle_noise, success_rate
from vlabench.optimizations.closed_loop.policy import SmallFlowPolicy
from vlabench.optimizations.closed_loop.reacher import OBS_DIM
from vlabench.optimizations.fidelity import FidelityVariant

PRECISIONS = ("bf16", "int8", "fp8", "int4")
"""The policy precisions the closed loop evaluates besides fp32, in the order rows are written."""
NONE = "none"
BF16_SCHEME = "bf16 weights and activations (observations and noise cast to bf16, actions back to fp32)"


@dataclass(frozen=True)
class PolicyAtPrecision:
    """A copy of the trained policy at one precision and how it was made."""

    policy: SmallFlowPolicy
    precision: str
    scheme: str
    quantized_linears: tuple[str, ...] = ()  # Linear layers the quantizer replaced
    float_linears: tuple[str, ...] = ()  # Linear layers it left at fp32 (shape or role), as the backend does


@dataclass(frozen=True)
class PrecisionStats:
    """The exact loop's task success with the policy at one precision."""

    stats: EpisodeStats
    precision: str
    scheme: str
    float_linears: tuple[str, ...] = ()


def variant_name(precision: str) -> str:
    """The closed-loop row of the exact loop at ``precision``: ``exact bf16``, ``exact int8``, …"""
    return f"exact {precision}"


def parse_precisions(text: str) -> tuple[str, ...]:
    """``bf16,int8,int4`` (any subset and order; case and repeats ignored) or ``none`` → precisions in row order."""
    names = [name.strip().lower() for name in str(text).split(",") if name.strip()]
    if names == [NONE]:
        return ()
    valid = f"Valid closed-loop precisions: {', '.join(sorted((*PRECISIONS, NONE)))} (a comma list, or {NONE} alone)."
    if not names:
        raise InputError(f"No closed-loop precision given. {valid}")
    if NONE in names:
        raise InputError(f"'{NONE}' cannot be combined with precisions. {valid}")
    for name in names:
        if name not in PRECISIONS:
            raise unknown_name("closed-loop precision", name, (*PRECISIONS, NONE))
    return tuple(precision for precision in PRECISIONS if precision in names)


def policy_at(policy: SmallFlowPolicy, precision: str) -> PolicyAtPrecision:
    """A copy of ``policy`` at ``precision`` (bf16, int8, fp8, int4), probed once; UnavailableError when it cannot
    run."""
    if precision not in PRECISIONS:
        raise unknown_name("closed-loop precision", precision, PRECISIONS)
    model = copy.deepcopy(policy).eval().requires_grad_(False)
    if precision == "bf16":
        at = PolicyAtPrecision(model.to(torch.bfloat16), precision, BF16_SCHEME)
    else:
        from vlabench.backends.torch.quantize import Quantizer

        quantizer = Quantizer(model.obs_mean.device, precision)  # UnavailableError: no scheme, or no torchao
        transform_modules(model, quantizer)
        if not quantizer.quantized:
            kept = ", ".join(sorted(quantizer.kept))
            raise UnavailableError(f"the torch {precision} scheme takes none of the policy's Linear layers ({kept})")
        at = PolicyAtPrecision(
            model,
            precision,
            quantizer.details()["quantization"],
            tuple(sorted(quantizer.quantized)),
            tuple(sorted(quantizer.kept)),
        )
    _probe(at)
    return at


def _probe(at: PolicyAtPrecision) -> None:
    """One prefix and one expert step, so a kernel that refuses this host or a layer is a skip, not a crash."""
    policy, device = at.policy, at.policy.obs_mean.device
    dtype = policy.obs_mean.dtype
    try:
        with torch.inference_mode():
            cache = policy.prefix(torch.zeros(1, OBS_DIM, device=device, dtype=dtype))
            noise = cycle_noise(0, 0, 0, policy.horizon).to(device, dtype)
            velocity = policy.denoise_step(noise, torch.ones(1, device=device), cache)
    except (RuntimeError, NotImplementedError) as exc:
        raise UnavailableError(f"the {at.precision} policy does not run here: {exc}") from exc
    if not torch.isfinite(velocity.float()).all():
        raise UnavailableError(f"the {at.precision} policy computes non-finite velocities")


def precision_success_rates(
    policy: SmallFlowPolicy,
    precisions: Iterable[str],
    episodes: int = 50,
    seed: int = 0,
    actions_per_chunk: int = 4,
) -> tuple[list[PrecisionStats], list[tuple[str, str]]]:
    """The exact loop at each precision on ``success_rate``'s seeded episodes and noise (the fp32 exact row's),
    and (variant, reason) for each precision that cannot run here."""
    rows, skipped = [], []
    for precision in precisions:
        name = variant_name(precision)
        try:
            at = policy_at(policy, precision)
        except UnavailableError as exc:
            skipped.append((name, str(exc)))
            continue
        stats = success_rate(at.policy, FidelityVariant(name=name), episodes, seed, actions_per_chunk)
        rows.append(PrecisionStats(stats, precision, at.scheme, at.float_linears))
    return rows, skipped
