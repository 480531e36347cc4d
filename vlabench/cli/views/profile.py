"""Rich tables for ``vlabench profile``: the passes, the per-phase SM table (the two-phase picture: SM, tensor and
DRAM activity next to the roofline verdict, each value labelled with its instrument), and the counters."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from vlabench.analysis.phase_summary import Activity
from vlabench.cli.views.tables import FittedTable, titled_table
from vlabench.results.profile_artifact import ProfileResult

SOURCES = {
    "GPM": "NVML GPM, each phase repeated alone between samples",
    "kernels": "CUPTI kernel records: SM-time the launches can occupy / phase wall time",
    "NVML": "nvmlDeviceGetUtilizationRates: share of time a kernel ran",
    "GR3D": "tegrastats GR3D_FREQ: GPU busy",
    "EMC": "tegrastats EMC load",
}


SM_COLUMNS = ("SM activity", "SM occupancy", "tensor", "DRAM util.", "GPU busy")  # in the order of _cells


def _share(cell: Activity | None) -> str:
    return "—" if cell is None else f"{cell.value:.0%} {cell.source}"


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def sm_table(result: ProfileResult) -> FittedTable:
    """Per phase: duration share, SM activity, SM occupancy, tensor activity, DRAM utilization, GPU busy, FLOP/B,
    bound and share of the roofline; an SM column no phase has a value for (on a CPU: all five) is left out."""
    measured = [i for i in range(len(SM_COLUMNS)) if any(_cells(row)[i] is not None for row in result.summary)]
    columns = ["phase", "mean ms", "share", *(SM_COLUMNS[i] for i in measured), "FLOP/B", "bound", "% of roofline"]
    title = f"Profile: {result.model} on {result.device} ({result.backend}, {result.precision}), per phase"
    table = FittedTable(
        title,
        columns,
        numeric=set(columns) - {"phase", "bound"},
        keys={"phase"},
        drop=[c for c in ("mean ms", "GPU busy", "SM occupancy", "FLOP/B") if c in columns],
    )
    for row in result.summary:
        share = row.share_of_attainable
        table.add_row(
            row.phase,
            f"{row.mean_ms:.2f}",
            f"{row.share_of_e2e:.0%}",
            *(_share(_cells(row)[i]) for i in measured),
            _num(row.intensity, 4),
            row.bound or "—",
            "—" if share is None else f"{share:.0%}",
        )
    return table


def counters_table(result: ProfileResult) -> Table:
    series = sorted({name for row in result.summary for name in row.counters})
    columns = ["phase", "spans"] + [f"{name} mean/peak" for name in series] + ["achieved TFLOP/s"]
    table = titled_table("Counters per phase (trace pass)", columns, numeric=set(columns) - {"phase"})
    for row in result.summary:
        counters = []
        for name in series:
            stat = row.counters.get(name)
            counters.append("—" if stat is None else f"{stat.mean:.0f}/{stat.peak:.0f} {stat.unit}")
        table.add_row(row.phase, str(row.spans), *counters, _num(row.achieved_tflops, 3))
    return table


def method_notes(result: ProfileResult) -> Text:
    """Which instrument each label stands for, and why GPM or the kernel records are missing where they are."""
    used = {cell.source for row in result.summary for cell in _cells(row) if cell is not None}
    lines = [f"{label}: {SOURCES[label]}" for label in SOURCES if label in used]
    tracing = result.sm_tracing
    if tracing is not None:
        if tracing.gpm and not tracing.gpm.get("available"):
            lines.append(f"GPM not used: {tracing.gpm.get('reason')}")
        elif tracing.gpm:
            lines.append(f"GPM windows: {tracing.gpm['windows_per_phase']} × {tracing.gpm['window_s']} s per phase")
        if tracing.kernels and not tracing.kernels.get("available"):
            lines.append(f"kernel records not used: {tracing.kernels.get('reason')}")
        if tracing.gpu is not None:
            gpu = tracing.gpu
            lines.append(f"{gpu.name}: {gpu.sm_count} SMs, compute capability {gpu.compute_capability}")
    return Text("\n".join(lines), style="dim")


def _cells(row) -> list[Activity | None]:
    return [row.sm_activity, row.sm_occupancy, row.tensor_activity, row.dram_utilization, row.gpu_busy]


def profile_table(result: ProfileResult) -> Group:
    """The SM table, the counters table and the method notes, printed together."""
    return Group(sm_table(result), counters_table(result), method_notes(result))


def passes_table(result: ProfileResult) -> Table:
    table = titled_table(
        "Passes (energy is never measured while profiling)",
        ["pass", "produced", "iterations", "s", "instruments"],
        numeric={"iterations", "s"},
    )
    for record in result.passes:
        table.add_row(
            record.name,
            record.produced,
            str(record.iterations),
            f"{record.duration_s:.1f}",
            ", ".join(record.instruments),
        )
    return table
