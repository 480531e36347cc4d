"""Ceiling micro-benchmarks: dense GEMM peak per precision and streaming memory bandwidth on a torch device."""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

import torch
from pydantic import BaseModel

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
GROWTH_STOP_S = 0.05  # stop growing the GEMM once one call takes this long


class MeasuredCeiling(BaseModel):
    """The best rate seen over repeated timed calls (a ceiling, so the maximum, not the median)."""

    quantity: str
    value: float
    unit: str
    repetitions: int
    detail: str


def _best_seconds(work: Callable[[], None], synchronize: Callable[[], None], budget_s: float) -> tuple[float, int]:
    work()
    synchronize()
    best, repetitions, started = float("inf"), 0, perf_counter()
    while repetitions < 3 or perf_counter() - started < budget_s:
        begin = perf_counter()
        work()
        synchronize()
        best = min(best, perf_counter() - begin)
        repetitions += 1
    return best, repetitions


def _synchronizer(device: torch.device) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def gemm_peak(
    precision: str, device: torch.device, budget_s: float = 1.0, max_size: int | None = None
) -> MeasuredCeiling:
    """Square n³ matmul at ``precision`` (2·n³ FLOP per call). n doubles from 256 while one call stays short, so a
    slow (emulated) precision is measured in seconds rather than minutes and a fast GPU gets a large enough n."""
    dtype = DTYPES[precision]
    synchronize = _synchronizer(device)
    limit = max_size or (8192 if device.type == "cuda" else 2048)
    size = 256
    while True:
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        out = torch.empty(size, size, device=device, dtype=dtype)
        torch.matmul(a, b, out=out)
        synchronize()
        begin = perf_counter()
        torch.matmul(a, b, out=out)
        synchronize()
        if size * 2 > limit or perf_counter() - begin > GROWTH_STOP_S:
            break
        size *= 2
    seconds, repetitions = _best_seconds(lambda: torch.matmul(a, b, out=out), synchronize, budget_s)
    return MeasuredCeiling(
        quantity=f"gemm_{precision}",
        value=2 * size**3 / seconds / 1e12,
        unit="TFLOP/s",
        repetitions=repetitions,
        detail=f"torch.matmul {size}×{size}×{size} {precision} on {device}, torch threads {torch.get_num_threads()}",
    )


def stream_bandwidth(device: torch.device, megabytes: int = 256, budget_s: float = 1.0) -> MeasuredCeiling:
    """Copy a buffer much larger than the caches: bytes read + bytes written per call."""
    elements = megabytes * 2**20 // 4
    source = torch.ones(elements, device=device)
    target = torch.empty_like(source)
    seconds, repetitions = _best_seconds(lambda: target.copy_(source), _synchronizer(device), budget_s)
    return MeasuredCeiling(
        quantity="memory_bandwidth",
        value=2 * source.numel() * 4 / seconds / 1e9,
        unit="GB/s",
        repetitions=repetitions,
        detail=f"copy of {megabytes} MiB fp32 on {device} (read + write counted)",
    )


def measure_ceilings(device: torch.device, precisions: tuple[str, ...] = ("fp32", "bf16")) -> list[MeasuredCeiling]:
    """GEMM peak per float precision and the stream bandwidth; a quantized precision (int8, int4) has no float GEMM
    to measure, so its roofline rests on the bandwidth and the profile's quoted peak."""
    return [*(gemm_peak(p, device) for p in precisions if p in DTYPES), stream_bandwidth(device)]
