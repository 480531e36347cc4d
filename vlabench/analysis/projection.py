"""Projected rows: every (model, device, stack, precision) the profiles allow, from the fitted projection model.

Latency per phase comes from ``projection_score.project_phases`` (roofline at the achieved shares of peak compute
and bandwidth + kernels × dispatch cost × host factor) with the parameters fitted on every published latency, and
the grouped-CV band of the stack on the device's class (``projection_bands``). Energy is estimated, never measured
(``projection_energy``: ``P = idle + (TDP - idle) × utilization`` over the projected latency, utilization the share
of the latency the device spends in kernels). Memory is the model deployed by the row's stack at its precision.
Cost follows ``analysis.cet.cost_report``.
"""

from __future__ import annotations

from vlabench.analysis.cet import CostAssumptions, ExecutionModel, cost_report
from vlabench.analysis.projected_rows import ProjectedRow
from vlabench.analysis.projection_bands import BAND_QUANTILE
from vlabench.analysis.projection_cache import model_facts
from vlabench.analysis.projection_energy import energy_band, idle_power, joules
from vlabench.analysis.projection_inputs import entry_inputs, model_inputs, power_mode, workload_for
from vlabench.analysis.projection_score import fitted_model, fitted_parameters, phase_ms, project_phases
from vlabench.analysis.projection_stacks import get_stack, stack_for_backend, stacks
from vlabench.errors import InputError, unknown_name
from vlabench.hardware.devices import DeviceProfile, all_profiles, load_device_profile
from vlabench.models.specs import load_model_spec, model_names

PRECISIONS = ("fp32", "bf16", "fp16", "int8", "fp8")
ENERGY_METHOD = (
    "estimated: (idle + (TDP - idle) x utilization) x projected latency; utilization = kernel-busy share; idle as "
    "the profile cites it, else estimated from its class (idle_source)"
)


def estimated_joules_per_inference(
    model: str,
    device: str,
    precision: str,
    latency_ms: float,
    stack: str = "pytorch-eager",
    cameras: int | None = None,
    steps: int | None = None,
) -> float | None:
    """Estimated J per inference at a given (e.g. published) latency: utilization is the share of it the fitted
    stack's kernels keep the device busy (roofline / share of peak + device-side kernel time), capped at 1; None
    without a TDP or ceiling."""
    profile = load_device_profile(device)
    idle = idle_power(profile)
    if profile.tdp_w is None or idle is None or latency_ms <= 0:
        return None
    spec = load_model_spec(model)
    _, workload = workload_for(spec, cameras, steps)
    try:
        inputs = entry_inputs(model, device, precision, workload.cameras, workload.steps)
    except InputError:
        return None
    params = fitted_parameters()
    busy = sum(phase_ms(inputs, params, stack, 1.0, phase)[1] for phase in ("vision", "prefill", "action"))
    return joules(profile.tdp_w.value, idle.watts, latency_ms, busy / latency_ms)


def device_stacks(profile: DeviceProfile) -> list[str]:
    """The stacks the device's backends run, in the profile's order."""
    found = [stack_for_backend(backend) for backend in profile.backends]
    return [s.name for s in found if s is not None]


def _precisions(profile: DeviceProfile) -> list[str]:
    return [p for p in PRECISIONS if p in profile.peak_tflops and profile.bandwidth_gbs is not None]


def project_one(
    model: str,
    device: str,
    stack: str,
    precision: str,
    control_hz: float = 10.0,
    cameras: int | None = None,
    steps: int | None = None,
    mode: str | None = None,
) -> ProjectedRow:
    """One projected row (the model's workload, or ``cameras`` and ``steps``, at the profile's maximum or at power
    ``mode``); refuses a stack the device does not run and a precision it has no ceiling for."""
    spec, profile, definition = load_model_spec(model), load_device_profile(device), get_stack(stack)
    allowed = device_stacks(profile)
    if stack not in allowed:
        raise InputError(
            f"{device} does not run the {stack} stack (no {definition.backend or stack} backend in its profile); "
            f"its stacks: {', '.join(allowed) or 'none'}"
        )
    if precision not in _precisions(profile):
        raise InputError(
            f"{device} has no {precision} peak and bandwidth in its profile; projectable precisions: "
            f"{', '.join(_precisions(profile)) or 'none (its ceilings are measured on the host)'}"
        )
    model_fit = fitted_model()
    spec, workload = workload_for(spec, cameras, steps)
    inputs = model_inputs(spec, workload, precision, profile, power_mode(profile, mode))
    projected = project_phases(inputs, model_fit.parameters, stack)
    e2e = projected.phases_ms["e2e"]
    band = model_fit.bands.band(stack, profile.device_class)
    needed = model_facts(spec, workload, precision).footprint_bytes[stack] / 1e9
    usable = profile.usable_gb
    idle = idle_power(profile)
    energy = None if idle is None else joules(profile.tdp_w.value, idle.watts, e2e, projected.busy_share)
    price = profile.price
    cost = None
    if energy is not None and idle is not None:
        cost = cost_report(
            price_usd=price.usd if price else None,
            price_source=price.source if price else None,
            price_estimate=False,
            joules_per_inference=energy,
            idle_w=idle.watts,
            energy_label="estimated",
            latency_p50_ms=e2e,
            control_hz=control_hz,
            execution=ExecutionModel(),
            assumptions=CostAssumptions(),
        )
    return ProjectedRow(
        model=spec.name,
        family=spec.family,
        device=profile.name,
        device_kind=profile.kind,
        stack=stack,
        precision=precision,
        cameras=workload.cameras,
        steps=workload.steps,
        power_mode=mode,
        phases_ms={phase: projected.phases_ms[phase] for phase in ("vision", "prefill", "action", "e2e")},
        kernel_counts=projected.kernels,
        error_band=band.value,
        band_quantile=BAND_QUANTILE,
        band_basis=band.basis,
        band_coverage=band.coverage,
        uncalibrated=band.uncalibrated,
        memory_needed_gb=needed,
        usable_memory_gb=usable,
        fits=needed <= usable if usable is not None else None,
        joules_per_inference=energy,
        energy_method=ENERGY_METHOD,
        energy_band=None
        if energy is None or idle is None
        else energy_band(band.value, profile.tdp_w.value, idle, e2e, projected.busy_share),
        idle_w=idle.watts if idle else None,
        idle_source=idle.source if idle else None,
        price_usd=price.usd if price else None,
        price_source=price.source if price else None,
        parameters_source=projected.parameters_source,
        inference_hz=1000.0 / e2e,
        actions_per_chunk=workload.actions_per_chunk,
        usd_per_million_actions=cost.usd_per_million_actions if cost else None,
        share_of_peak=projected.share_of_peak,
        share_of_bandwidth=projected.share_of_bandwidth,
        dispatch_us=projected.dispatch_us,
        host_factor=projected.host_factor,
    )


def project_all(
    models: list[str] | None = None,
    devices: list[str] | None = None,
    stack_names: list[str] | None = None,
    precisions: list[str] | None = None,
    control_hz: float = 10.0,
    cameras: int | None = None,
    steps: int | None = None,
    mode: str | None = None,
) -> list[ProjectedRow]:
    """Every (model, device, stack, precision) the profiles allow, narrowed by the given lists (None: all; the
    ``-tiny`` test models only when named), at each model's workload or ``cameras`` and ``steps``, at each device's
    maximum or at power ``mode`` (which every named device must have)."""
    for name in stack_names or []:
        get_stack(name)
    for name in precisions or []:
        if name not in PRECISIONS:
            raise unknown_name("precision", name, PRECISIONS)
    chosen_models = models or [m for m in model_names() if not m.endswith("-tiny")]
    profiles = [load_device_profile(d) for d in devices] if devices else all_profiles()
    rows = []
    for model in chosen_models:
        load_model_spec(model)
        for profile in profiles:
            for stack in device_stacks(profile):
                if stack_names and stack not in stack_names:
                    continue
                for precision in _precisions(profile):
                    if precisions and precision not in precisions:
                        continue
                    rows.append(project_one(model, profile.name, stack, precision, control_hz, cameras, steps, mode))
    return rows


def known_stacks() -> list[str]:
    return list(stacks())
