"""Rich tables of ``vlabench models`` and ``vlabench devices``, and the plain rows behind them (also their JSON)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from vlabench.cli.views.tables import table
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
                "sampler": workload.sampler,
                "steps": workload.steps,
                "chunk": workload.chunk,
            }
        )
    return rows


def modelstable(rows: list[dict[str, Any]]) -> Table:
    columns = ["model", "params", "published", "Δ", "image", "tok/cam", "cams", "prefix tok", "backbone", "action head"]
    columns += ["steps", "chunk"]
    table = table("Model replicas", columns, {"params", "published", "Δ", "tok/cam", "cams", "prefix tok", "steps"})
    for row in rows:
        reference = row["reference_params"]
        table.add_row(
            row["name"],
            count(row["params"]),
            count(reference) if reference else "tiny",
            f"{row['params_delta_pct']:+.1f}%" if reference else "",
            f"{row['image_size']} px",
            str(row["tokens_per_camera"]),
            str(row["cameras"]),
            str(row["prefix_tokens"]),
            row["backbone"],
            row["action_head"],
            str(row["steps"]),
            str(row["chunk"]),
        )
    return table


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


def devicestable(rows: list[dict[str, Any]]) -> Table:
    columns = ["", "device", "name", "kind", "memory GB", "BW GB/s", "peak TFLOP/s", "TDP W", "price USD"]
    table = table("Device profiles (● detected here, ★ --device auto)", columns, set(columns[4:]))
    for row in rows:
        mark = "★" if row["auto"] else "●" if row["detected"] else ""
        table.add_row(
            mark,
            row["name"],
            row["display_name"],
            row["kind"],
            maybe(row["memory_gb"]),
            maybe(row["bandwidth_gbs"]),
            f"{row['peak_tflops']:g} {row['peak_precision']}" if row["peak_tflops"] else "—",
            maybe(row["tdp_w"]),
            (f"{row['price_usd']:,.0f}" + (" est" if row["price_estimate"] else "")) if row["price_usd"] else "—",
        )
    return table


def ceilingstable(resolved, measured) -> Table:
    """Measured ceilings next to the profile's datasheet figures."""
    profile = resolved.profile
    table = table(
        f"Measured ceilings of {profile.name} on {resolved.torch_device} (best of repeated runs)",
        ["quantity", "measured", "datasheet", "measured / datasheet", "how"],
        {"measured", "datasheet", "measured / datasheet"},
    )
    for ceiling in measured:
        if ceiling.quantity == "memory_bandwidth":
            sheet = profile.bandwidth_gbs
        else:
            sheet = profile.peak_tflops.get(ceiling.quantity.removeprefix("gemm_"))
        table.add_row(
            ceiling.quantity,
            f"{ceiling.value:.4g} {ceiling.unit}",
            f"{sheet.value:g} {ceiling.unit}" if sheet else "—",
            f"{ceiling.value / sheet.value:.0%}" if sheet else "",
            ceiling.detail,
        )
    return table


def count(value: int) -> str:
    return f"{value / 1e9:.2f}B" if value >= 1e9 else f"{value / 1e6:.1f}M" if value >= 1e6 else f"{value / 1e3:.0f}K"


def maybe(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"
