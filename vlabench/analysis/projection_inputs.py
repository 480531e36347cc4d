"""What the projection model reads of a (model, workload, precision, device, power mode): the operators of each phase
on the device's datasheet ceiling, the kernels each phase launches under each counting scheme, and the device's host.

The workload is the model's own unless a caller (a published entry, ``vlabench project --cameras/--steps``) states
cameras, steps, prompt tokens or chunk. A power mode whose profile states its caps scales the ceiling (peak compute
by its GPU clock and enabled TPCs, bandwidth by its memory clock) and the board CPU's clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, cached_property

import numpy as np

from vlabench.analysis.operator_mix import OperatorMix
from vlabench.analysis.projection_cache import model_facts
from vlabench.analysis.projection_fit import HostTerms, host_terms
from vlabench.analysis.roofline import Ceiling, datasheet_ceiling
from vlabench.errors import InputError, unknown_name
from vlabench.hardware.devices import DeviceProfile, PowerMode, load_device_profile
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision

PHASES = ("vision", "prefill", "action", "e2e")
STEPS = ("vision", "prefill", "action")
PARTS = {"vision": ("vision",), "prefill": ("prefill",), "prefix": ("vision", "prefill"), "action": ("action",)}
PARTS["e2e"] = STEPS
ACTIVATION_PRECISIONS = ("fp32",)
"""Precisions a stack may run its weightless operators at (``Stack.activation_precision``)."""
"""The projected phases each published phase sums (``prefix``: vision + prefill)."""


@dataclass(frozen=True)
class Inputs:
    """Per phase (vision, prefill, action): the operators on the datasheet ceiling; the kernels under each counting
    scheme per phase and end to end; the datasheet peak at the precision (device-side kernel time); the host."""

    mixes: dict[str, OperatorMix]
    kernels: dict[str, dict[str, int]]
    peak_tflops: float
    host: HostTerms | None = None
    activation_mixes: dict[str, dict[str, OperatorMix]] = field(default_factory=dict)
    """activation precision -> phase -> the operators with their weightless ones at that precision (a stack's
    ``activation_precision``), where the device has a peak at it"""

    def mix(self, phase: str, activation_precision: str | None = None) -> OperatorMix:
        """One phase's operators, with the weightless ones at ``activation_precision`` when given and known."""
        return self.activation_mixes.get(activation_precision or "", self.mixes)[phase]

    def floor_ms(
        self, phase: str, share: float = 1.0, bandwidth_share: float = 1.0, activation_precision: str | None = None
    ) -> float:
        """The phase's roofline floor at these achieved shares (1 and 1: the datasheet floor); e2e sums them."""
        return sum(self.mix(name, activation_precision).floor_ms(share, bandwidth_share) for name in PARTS[phase])

    @property
    def roofline_ms(self) -> dict[str, float]:
        return {phase: self.floor_ms(phase) for phase in (*PHASES, "prefix")}

    @cached_property
    def end_to_end(self) -> OperatorMix:
        """Every phase's operators in one mix (the e2e floor is their sum at any shares), built once per inputs."""
        parts = [self.mixes[name] for name in STEPS]
        return OperatorMix.of(
            [float(f) for m in parts for f in np.diff(m.cum_flops)],
            [float(b) for m in parts for b in np.diff(m.cum_bytes)],
            parts[0].peak / 1e9,
            parts[0].bandwidth / 1e6,
        )


def power_mode(profile: DeviceProfile, name: str | None) -> PowerMode | None:
    """The profile's power mode called ``name`` (None: the profile's own ceilings, its maximum)."""
    if name is None:
        return None
    found = {mode.name: mode for mode in profile.power_modes}
    if name not in found:
        raise unknown_name(f"power mode of {profile.name}", name, found)
    return found[name]


def workload_for(
    spec: ModelSpec,
    cameras: int | None = None,
    steps: int | None = None,
    prompt_tokens: int | None = None,
    chunk: int | None = None,
    batch: int = 1,
) -> tuple[ModelSpec, Workload]:
    """The spec (with its instruction length replaced by ``prompt_tokens`` when given) and its workload."""
    if prompt_tokens is not None and prompt_tokens != spec.language_tokens:
        spec = spec.model_copy(update={"language_tokens": prompt_tokens})
    return spec, Workload.from_spec(spec, cameras, steps, chunk=chunk, batch=batch)


def model_inputs(
    spec: ModelSpec, workload: Workload, precision: str, profile: DeviceProfile, mode: PowerMode | None = None
) -> Inputs:
    """The roofline floor per phase (sum over operators of max(FLOPs/peak, bytes/bandwidth) on the datasheet
    ceiling, as ``roofline.analyze`` computes it, capped by the power mode) and kernel counts per phase under both
    schemes."""
    ceiling = datasheet_ceiling(profile, precision)
    if ceiling is None:
        raise InputError(f"{profile.name} has no {precision} peak and bandwidth in its profile: nothing to project on")
    peak = ceiling.peak_tflops * ((mode.compute_share or 1.0) if mode else 1.0)
    bandwidth = ceiling.bandwidth_gbs * ((mode.memory_share or 1.0) if mode else 1.0)
    facts = model_facts(spec, workload, precision)
    operators = facts.operators
    if Precision.is_quantized(precision):
        operators = _weightless_at(operators, _sixteen_bit(profile), ceiling.peak_tflops, precision)
    mixes = _mixes(operators, workload.steps, peak, bandwidth)
    activation_mixes = {}
    for name in ACTIVATION_PRECISIONS:
        if name != precision:
            wide = _weightless_at(facts.operators, datasheet_ceiling(profile, name), ceiling.peak_tflops, precision)
            if wide is not facts.operators:
                activation_mixes[name] = _mixes(wide, workload.steps, peak, bandwidth)
    host = host_terms(profile)
    if mode is not None and mode.cpu_ghz is not None and host.clock_ghz is not None:
        host = HostTerms(host.device_class, host.launch_path, host.core, min(host.clock_ghz, mode.cpu_ghz))
    return Inputs(
        mixes=mixes,
        kernels={scheme: facts.kernels.per_phase(scheme, workload.steps) for scheme in ("eager", "fused")},
        peak_tflops=peak,
        host=host,
        activation_mixes=activation_mixes,
    )


def _sixteen_bit(profile: DeviceProfile) -> Ceiling | None:
    """The 16-bit ceiling a quantized run keeps its weightless operators at: bf16's, else fp16's."""
    return datasheet_ceiling(profile, "bf16") or datasheet_ceiling(profile, "fp16")


def _weightless_at(
    operators: dict[str, list[tuple[float, float, float]]], wide: Ceiling | None, peak_tflops: float, precision: str
) -> dict[str, list[tuple[float, float, float]]]:
    """The operators with the weightless ones (attention scores and values) at ``wide``'s precision: FLOPs as their
    time at its peak (in FLOPs at ``peak_tflops``), bytes on activations of its width; unchanged without ``wide``."""
    if wide is None:
        return operators
    slowdown = peak_tflops / wide.peak_tflops
    widening = Precision.BYTES[wide.precision] / Precision.BYTES[precision]
    return {phase: _weightless_scaled(ops, slowdown, widening) for phase, ops in operators.items()}


def _weightless_scaled(
    operators: list[tuple[float, float, float]], slowdown: float, widening: float
) -> list[tuple[float, float, float]]:
    """The operators with the weightless ones' FLOPs as their time at a ``slowdown`` times lower peak and their bytes
    ``widening`` times wider (the operators with weights unchanged)."""
    return [(f * slowdown, b * widening, w) if w == 0 else (f, b, w) for f, b, w in operators]


def _mixes(
    operators: dict[str, list[tuple[float, float, float]]], steps: int, peak: float, bandwidth: float
) -> dict[str, OperatorMix]:
    """Per phase (vision, prefill, action: ``steps`` denoising steps) the mix of its operators on this ceiling."""
    repeats = {"vision": 1, "prefill": 1, "denoise_step": steps}
    named = {"vision": "vision", "prefill": "prefill", "denoise_step": "action"}
    return {
        named[key]: OperatorMix.of(
            [f * repeats[key] for f, _, _ in ops], [b * repeats[key] for _, b, _ in ops], peak, bandwidth
        )
        for key, ops in operators.items()
    }


@cache
def entry_inputs(
    model: str,
    device: str,
    precision: str,
    cameras: int,
    steps: int,
    prompt_tokens: int | None = None,
    chunk: int | None = None,
    mode: str | None = None,
    batch: int = 1,
) -> Inputs:
    """The inputs of a named model on a named device at this workload and power mode (cached per process)."""
    profile = load_device_profile(device)
    spec, workload = workload_for(load_model_spec(model), cameras, steps, prompt_tokens, chunk, batch)
    return model_inputs(spec, workload, precision, profile, power_mode(profile, mode))
