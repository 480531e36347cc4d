"""Kernel-level SM coverage per phase, from the torch profiler's CUDA kernel records (CUPTI, through kineto).

Works on every CUDA GPU, Jetson included, where GPM (``telemetry/gpm.py``) is missing. For each kernel record of the
exported kineto trace (``"cat": "kernel"``; args ``grid``, ``block``, ``registers per thread``, ``shared memory``
= static + dynamic bytes per block) this module computes, from a per-compute-capability table of SM limits:

- resident blocks per SM = min(max blocks per SM, warp slots / warps per block, registers per SM / registers per
  block (per-warp allocation rounded up to 256 registers), shared memory per SM / (shared memory per block + the
  1 KB the runtime reserves per block from compute capability 8.0 on, rounded up to the allocation unit));
- theoretical occupancy = resident warps / max warps per SM;
- waves = ceil(blocks / (SMs x resident blocks)); assuming equal-length waves, the time-averaged **SM share** (SMs
  holding at least one block / SMs) and **warp share** (warp slots filled / the GPU's warp slots). A full wave (SMs x
  resident blocks) gives SM share 1 and warp share = the theoretical occupancy.

Per phase, each kernel counts for the part of its duration inside the phase's spans (operators pass; the torch
profiler was shifted onto the spans' clock): SM-time used = sum of overlap x SM share, warp-time = sum of overlap x
warp share. ``sm_activity = SM-time used / SM-time available``, the available time being the phase's wall time. The
profile divides by the trace pass's span duration (no profiler attached), since the profiler lengthens host gaps but
not kernels; both per-span figures are recorded. It estimates what GPM's SM activity measures (SMs holding a warp,
stalled or not) assuming every block holds its SM for the whole wave, so kernels with uneven blocks or a long tail
read higher here than under GPM; concurrent kernels are summed and the phase figure capped at 1.

Limits: CUDA C++ Programming Guide, "Compute Capabilities", Technical Specifications per Compute Capability table;
the device's own threads, registers and shared memory per SM override the table when torch reports them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from vlabench.telemetry.counters import Series

WARP = 32
REGISTER_UNIT = 256  # registers per warp are allocated in units of 256 (compute capability 5.0 and later)
KB = 1024

# (major, minor) -> (max threads per SM, max resident blocks per SM, 32-bit registers per SM, shared memory per SM
# in bytes at the largest carveout, bytes reserved per block, shared memory allocation unit)
SM_TABLE: dict[tuple[int, int], tuple[int, int, int, int, int, int]] = {
    (7, 0): (2048, 32, 65536, 96 * KB, 0, 256),  # V100
    (7, 2): (2048, 32, 65536, 96 * KB, 0, 256),  # Jetson AGX Xavier
    (7, 5): (1024, 16, 65536, 64 * KB, 0, 256),  # T4, RTX 20
    (8, 0): (2048, 32, 65536, 164 * KB, KB, 128),  # A100
    (8, 6): (1536, 16, 65536, 100 * KB, KB, 128),  # A10, RTX 30
    (8, 7): (1536, 16, 65536, 164 * KB, KB, 128),  # Jetson Orin
    (8, 9): (1536, 24, 65536, 100 * KB, KB, 128),  # L4, L40S, RTX 40
    (9, 0): (2048, 32, 65536, 228 * KB, KB, 128),  # H100, H200
    (10, 0): (2048, 32, 65536, 228 * KB, KB, 128),  # B200
    (12, 0): (1536, 32, 65536, 100 * KB, KB, 128),  # RTX 50
}
KERNEL_METHOD = (
    "CUPTI kernel records (torch profiler, operators pass): per kernel resident blocks per SM from threads, "
    "registers, shared memory and the block limit; SM share and warp share over equal-length waves; summed over "
    "each kernel's time inside the phase's spans; divided by the trace pass's span time"
)
TABLE_SOURCE = "CUDA C++ Programming Guide, Compute Capabilities (technical specifications per compute capability)"


class GpuSm(BaseModel):
    """The SM count and the per-SM limits the coverage arithmetic used, and where each came from."""

    name: str
    compute_capability: str
    sm_count: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    shared_memory_per_sm: int
    reserved_shared_memory_per_block: int
    shared_memory_unit: int
    limits_source: str

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP


def gpu_sm(name: str, major: int, minor: int, sm_count: int, reported: Mapping[str, int | None]) -> GpuSm:
    """Limits for compute capability ``major.minor``: the table's, with the device-reported ``max_threads_per_sm``,
    ``registers_per_sm`` and ``shared_memory_per_sm`` taking precedence. Outside the table: the nearest capability
    below it (the lowest in the table below that), and the source says so."""
    key = (major, minor)
    source = TABLE_SOURCE
    if key not in SM_TABLE:
        nearest = max((k for k in SM_TABLE if k < key), default=min(SM_TABLE))
        source = f"{major}.{minor} is not in the table: {nearest[0]}.{nearest[1]}'s limits ({TABLE_SOURCE})"
        key = nearest
    threads, blocks, registers, shared, reserved, unit = SM_TABLE[key]
    overridden = {k: v for k, v in reported.items() if v}
    if overridden:
        source += f"; reported by the device: {', '.join(sorted(overridden))}"
    return GpuSm(
        name=name,
        compute_capability=f"{major}.{minor}",
        sm_count=sm_count,
        max_threads_per_sm=overridden.get("max_threads_per_sm", threads),
        max_blocks_per_sm=blocks,
        registers_per_sm=overridden.get("registers_per_sm", registers),
        shared_memory_per_sm=overridden.get("shared_memory_per_sm", shared),
        reserved_shared_memory_per_block=reserved,
        shared_memory_unit=unit,
        limits_source=source,
    )


def gpu_sm_of(properties: Any) -> GpuSm:
    """From ``torch.cuda.get_device_properties``; the per-SM fields newer torch versions expose override the table."""
    reported = {
        "max_threads_per_sm": getattr(properties, "max_threads_per_multi_processor", None),
        "registers_per_sm": getattr(properties, "regs_per_multiprocessor", None),
        "shared_memory_per_sm": getattr(properties, "shared_memory_per_multiprocessor", None),
    }
    return gpu_sm(properties.name, properties.major, properties.minor, properties.multi_processor_count, reported)


def gpu_sm_of_kineto(entry: Mapping[str, Any]) -> GpuSm:
    """From one ``deviceProperties`` entry of a kineto trace (the torch profiler writes the CUDA device's)."""
    reported = {
        "max_threads_per_sm": entry.get("maxThreadsPerMultiprocessor"),
        "registers_per_sm": entry.get("regsPerMultiprocessor"),
        "shared_memory_per_sm": entry.get("sharedMemPerMultiprocessor"),
    }
    return gpu_sm(str(entry.get("name", "")), entry["computeMajor"], entry["computeMinor"], entry["numSms"], reported)


@dataclass(frozen=True)
class Kernel:
    """One CUDA kernel record; times in microseconds on the trace's clock."""

    name: str
    start_us: float
    dur_us: float
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    shared_memory: int


@dataclass(frozen=True)
class Coverage:
    blocks: int
    warps_per_block: int
    resident_blocks: int  # per SM
    limited_by: str
    occupancy: float  # theoretical: resident warps / max warps per SM
    waves: int
    sm_share: float  # time-averaged share of SMs holding a block
    warp_share: float  # time-averaged share of the GPU's warp slots filled


def kernels_of(events: Iterable[Mapping[str, Any]]) -> tuple[list[Kernel], int]:
    """The kernel records with launch geometry, and how many kernel records lacked it."""
    kernels, without = [], 0
    for event in events:
        if event.get("ph") != "X" or str(event.get("cat", "")).lower() != "kernel":
            continue
        args = event.get("args") or {}
        try:
            grid = tuple(int(v) for v in args["grid"])
            block = tuple(int(v) for v in args["block"])
            kernel = Kernel(
                name=str(event.get("name", "")),
                start_us=float(event["ts"]),
                dur_us=float(event.get("dur", 0.0)),
                grid=(*grid, 1, 1, 1)[:3],  # type: ignore[arg-type]
                block=(*block, 1, 1, 1)[:3],  # type: ignore[arg-type]
                registers=int(args.get("registers per thread", 0)),
                shared_memory=int(args.get("shared memory", 0)),
            )
        except (KeyError, TypeError, ValueError):
            without += 1
            continue
        kernels.append(kernel)
    return kernels, without


def coverage(kernel: Kernel, gpu: GpuSm) -> Coverage:
    """Resident blocks per SM, theoretical occupancy, waves, SM share and warp share of one launch."""
    blocks = math.prod(kernel.grid)
    warps = max(1, math.ceil(math.prod(kernel.block) / WARP))
    limits = {"blocks": gpu.max_blocks_per_sm, "threads": gpu.max_warps_per_sm // warps}
    if kernel.registers > 0:
        per_warp = math.ceil(kernel.registers * WARP / REGISTER_UNIT) * REGISTER_UNIT
        limits["registers"] = gpu.registers_per_sm // per_warp // warps
    shared = kernel.shared_memory + gpu.reserved_shared_memory_per_block
    if shared > 0:
        unit = gpu.shared_memory_unit
        limits["shared memory"] = gpu.shared_memory_per_sm // (math.ceil(shared / unit) * unit)
    limited_by = min(limits, key=lambda k: limits[k])
    resident = limits[limited_by]
    if resident < 1:  # the table's limits are tighter than what the kernel ran with: count one block per SM
        resident, limited_by = 1, f"{limited_by} (over the table's limit)"
    capacity = gpu.sm_count * resident
    waves = max(1, math.ceil(blocks / capacity))
    full, tail = divmod(blocks, capacity)
    sm_share = (full + min(tail, gpu.sm_count) / gpu.sm_count) / waves
    warp_share = blocks * warps / (waves * gpu.sm_count * gpu.max_warps_per_sm)
    return Coverage(
        blocks=blocks,
        warps_per_block=warps,
        resident_blocks=resident,
        limited_by=limited_by,
        occupancy=resident * warps / gpu.max_warps_per_sm,
        waves=waves,
        sm_share=sm_share,
        warp_share=warp_share,
    )


class KernelPhase(BaseModel):
    """One phase's kernels in the operators pass, per span (means over its spans)."""

    phase: str
    spans: int
    kernels: int  # kernel records overlapping the phase's spans, all spans together
    span_ms: float  # mean span wall time in the operators pass (profiler attached)
    kernel_ms: float  # sum of kernel time inside a span
    busy_ms: float  # time at least one kernel ran ("a kernel was running", what NVML utilization counts)
    sm_ms: float  # SM-time used, in full-GPU milliseconds: sum of overlap x SM share
    warp_ms: float  # sum of overlap x warp share

    def sm_activity(self, wall_ms: float | None = None) -> float:
        """SM-time used / SM-time available, over ``wall_ms`` (default: the operators pass's span), at most 1."""
        wall = wall_ms or self.span_ms
        return min(1.0, self.sm_ms / wall) if wall > 0 else 0.0

    def warp_occupancy(self, wall_ms: float | None = None) -> float:
        wall = wall_ms or self.span_ms
        return min(1.0, self.warp_ms / wall) if wall > 0 else 0.0


def phase_coverage(
    kernels: Sequence[Kernel], windows: Mapping[str, Sequence[tuple[float, float]]], gpu: GpuSm
) -> list[KernelPhase]:
    """Per phase (``windows``: span (start, end) in µs on the kernels' clock), the kernels' time and SM-time."""
    covered = [(k, coverage(k, gpu)) for k in kernels]
    rows = []
    for phase, spans in windows.items():
        if not spans:
            continue
        count = 0
        kernel_us = busy_us = sm_us = warp_us = 0.0
        for start, end in spans:
            inside = []
            for kernel, cover in covered:
                lo, hi = max(start, kernel.start_us), min(end, kernel.start_us + kernel.dur_us)
                if hi <= lo:
                    continue
                count += 1
                inside.append((lo, hi))
                kernel_us += hi - lo
                sm_us += (hi - lo) * cover.sm_share
                warp_us += (hi - lo) * cover.warp_share
            busy_us += _union(inside)
        n = len(spans)
        rows.append(
            KernelPhase(
                phase=phase,
                spans=n,
                kernels=count,
                span_ms=sum(end - start for start, end in spans) / n / 1e3,
                kernel_ms=kernel_us / n / 1e3,
                busy_ms=busy_us / n / 1e3,
                sm_ms=sm_us / n / 1e3,
                warp_ms=warp_us / n / 1e3,
            )
        )
    return rows


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -math.inf
    for lo, hi in sorted(intervals):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


def kernel_report(
    events: Iterable[Mapping[str, Any]],
    shift_us: float,
    windows_us: Mapping[str, Sequence[tuple[float, float]]],
    gpu: GpuSm,
    to_ns: Any,
) -> tuple[dict[str, Any], list[KernelPhase], list[Series]]:
    """From a kineto trace's events (moved ``shift_us`` onto the spans' µs clock): the status the profile records,
    the coverage per phase (``windows_us``) and the step-function counter tracks (``to_ns``: µs -> spans' ns)."""
    found, without = kernels_of(events)
    kernels = [Kernel(**{**k.__dict__, "start_us": k.start_us + shift_us}) for k in found]
    reason = None if kernels else "the torch profiler recorded no CUDA kernel with launch geometry"
    status = {
        "available": reason is None,
        "reason": reason,
        "method": KERNEL_METHOD,
        "records": len(kernels),
        "without_geometry": without,
    }
    if not kernels:
        return status, [], []
    return status, phase_coverage(kernels, windows_us, gpu), coverage_series(kernels, gpu, to_ns)


def coverage_series(kernels: Sequence[Kernel], gpu: GpuSm, to_ns: Any) -> list[Series]:
    """Step functions of the running kernels' summed SM share and warp share (%, at most 100) for the Chrome trace;
    ``to_ns`` maps the kernels' µs back to the spans' ns clock."""
    changes: list[tuple[float, float, float]] = []
    for kernel in kernels:
        cover = coverage(kernel, gpu)
        changes.append((kernel.start_us, cover.sm_share, cover.warp_share))
        changes.append((kernel.start_us + kernel.dur_us, -cover.sm_share, -cover.warp_share))
    changes.sort(key=lambda change: change[0])
    sm = Series("kernel sm share", "%", headline="kernels")
    warp = Series("kernel warp occupancy", "%", headline="kernels")
    sm_level = warp_level = 0.0
    for (t, d_sm, d_warp), following in zip(changes, [*changes[1:], None], strict=True):
        sm_level, warp_level = sm_level + d_sm, warp_level + d_warp
        if following is None or following[0] <= t:
            continue
        start, end = to_ns(t), to_ns(following[0])
        sm.add("kernels", start, end, round(min(100.0, 100 * max(0.0, sm_level)), 3))
        warp.add("kernels", start, end, round(min(100.0, 100 * max(0.0, warp_level)), 3))
    return [sm, warp] if sm.samples else []
