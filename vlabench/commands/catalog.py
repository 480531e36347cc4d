"""``vlabench models`` and ``vlabench devices`` without the UI: one plain row per model replica and per device
profile (the tables and the ``--json`` output both print these)."""

from __future__ import annotations

from typing import Any

from vlabench.hardware.detection import detect_host
from vlabench.hardware.devices import all_profiles, profile_present, resolve_device
from vlabench.models.replicas import count_parameters
from vlabench.models.specs import load_model_spec, model_names
from vlabench.models.workload import Workload


def model_rows() -> list[dict[str, Any]]:
    rows = []
    for name in model_names():
        spec = load_model_spec(name)
        workload = Workload.from_spec(spec)
        params = count_parameters(spec)
        reference = spec.reference.params if spec.reference else None
        rows.append(
            {
                "name": name,
                "family": spec.family,
                "params": params,
                "reference_params": reference,
                "params_delta_pct": round((params - reference) / reference * 100, 2) if reference else None,
                "image_size": "×".join(map(str, dict.fromkeys(spec.image_shape))),
                "tokens_per_camera": spec.tokens_per_camera,
                "cameras": workload.cameras,
                "prefix_tokens": workload.prefix_tokens,
                "backbone": spec.summary[0],
                "action_head": spec.summary[1],
                "action_loop": workload.action_loop,
                "steps": workload.steps,
                "chunk": workload.chunk,
            }
        )
    return rows


def device_rows() -> tuple[list[dict[str, Any]], str]:
    host = detect_host()
    auto = resolve_device("auto", host)
    rows = []
    for profile in all_profiles():
        precision = next((p for p in ("fp16", "bf16", "fp32") if p in profile.peak_tflops), None)
        peak = profile.peak_tflops[precision] if precision else None
        rows.append(
            {
                "name": profile.name,
                "display_name": profile.display_name,
                "kind": profile.kind,
                "vendor": profile.vendor,
                "memory_gb": profile.memory_gb.value if profile.memory_gb else None,
                "bandwidth_gbs": profile.bandwidth_gbs.value if profile.bandwidth_gbs else None,
                "peak_tflops": peak.value if peak else None,
                "peak_precision": precision,
                "tdp_w": profile.tdp_w.value if profile.tdp_w else None,
                "price_usd": profile.price.usd if profile.price else None,
                "price_estimate": bool(profile.price and profile.price.estimate),
                "sources": {
                    key: getattr(profile, key).source
                    for key in ("memory_gb", "bandwidth_gbs", "tdp_w", "price")
                    if getattr(profile, key) is not None
                },
                "detected": profile_present(profile, host),
                "auto": profile.name == auto.profile.name,
            }
        )
    host_line = f"This host: {host.describe()}. --device auto resolves to {auto.profile.name} ({auto.note})."
    return rows, host_line
