"""Rich tables of ``vlabench models`` and ``vlabench devices`` (their rows come from ``commands.catalog``)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from vlabench.cli.views.tables import FittedTable, titled_table
from vlabench.hardware.devices import ResolvedDevice
from vlabench.kernels.ceilings import MeasuredCeiling


def models_table(rows: list[dict[str, Any]]) -> FittedTable:
    columns = ["model", "params", "published", "Δ", "image", "tok/cam", "cams", "prefix tok", "backbone", "action head"]
    columns += ["steps", "chunk"]
    table = FittedTable(
        "Model replicas",
        columns,
        {"params", "published", "Δ", "tok/cam", "cams", "prefix tok", "steps"},
        keys={"model"},
        drop=["published", "Δ", "tok/cam", "image", "cams", "backbone", "action head"],
    )
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


def devices_table(rows: list[dict[str, Any]]) -> FittedTable:
    columns = ["", "device", "name", "kind", "memory GB", "BW GB/s", "peak TFLOP/s", "TDP W", "price USD"]
    table = FittedTable(
        "Device profiles (● detected here, ★ --device auto)",
        columns,
        set(columns[4:]),
        keys={"", "device"},
        drop=["kind", "TDP W", "BW GB/s", "name"],
    )
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


def ceilings_table(resolved: ResolvedDevice, measured: list[MeasuredCeiling]) -> Table:
    """Measured ceilings next to the profile's datasheet figures."""
    profile = resolved.profile
    table = titled_table(
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
