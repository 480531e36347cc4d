"""Ceiling micro-benchmarks: dense GEMM peak per precision and streaming memory bandwidth on a torch device."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from time import perf_counter

import torch
from pydantic import BaseModel

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8}
UNITS = {"int8": "TOP/s"}  # integer operations; the float precisions count FLOP
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
    """Square n³ matmul at ``precision`` (2·n³ operations per call; int8: ``torch._int_mm``, int8 × int8 → int32,
    the kernel torchao's int8 runs call). n doubles from 256 while one call stays short, so a slow (emulated)
    precision is measured in seconds rather than minutes and a fast GPU gets a large enough n."""
    dtype = DTYPES[precision]
    integer = not dtype.is_floating_point
    synchronize = _synchronizer(device)
    limit = max_size or (8192 if device.type == "cuda" else 2048)
    size = 256
    scale = 50 if integer else 1  # int8 operands spread over the int8 range, not rounded to -1, 0, 1
    while True:
        a = (torch.randn(size, size, device=device) * scale).to(dtype)
        b = (torch.randn(size, size, device=device) * scale).to(dtype)
        out = torch.empty(size, size, device=device, dtype=torch.int32 if integer else dtype)
        multiply = partial(torch._int_mm if integer else torch.matmul, a, b, out=out)
        multiply()
        synchronize()
        begin = perf_counter()
        multiply()
        synchronize()
        if size * 2 > limit or perf_counter() - begin > GROWTH_STOP_S:
            break
        size *= 2
    seconds, repetitions = _best_seconds(multiply, synchronize, budget_s)
    kernel = "torch._int_mm" if integer else "torch.matmul"
    detail = f"{kernel} {size}×{size}×{size} {precision} on {device}"
    if integer and device.type == "cpu":
        ours = _int8_kernel_seconds(size, budget_s)
        if ours is not None:
            (path, our_seconds, our_repetitions), theirs = ours, 2 * size**3 / seconds / 1e12
            detail = (
                f"best of {detail} ({theirs:.3f} TOP/s) and vlabench's int8 kernel ({path} path, activations "
                f"quantized in the call) at the same size ({2 * size**3 / our_seconds / 1e12:.3f} TOP/s)"
            )
            if our_seconds < seconds:
                seconds, repetitions = our_seconds, our_repetitions
    return MeasuredCeiling(
        quantity=f"gemm_{precision}",
        value=2 * size**3 / seconds / 1e12,
        unit=UNITS.get(precision, "TFLOP/s"),
        repetitions=repetitions,
        detail=f"{detail}, torch threads {torch.get_num_threads()}",
    )


def _int8_kernel_seconds(size: int, budget_s: float) -> tuple[str, float, int] | None:
    """(path, best seconds, repetitions) of vlabench's int8 linear on a size × size weight and size rows, on the
    first of its paths this CPU runs; None where none runs or it cannot be built. The int8 ceiling is the best of
    this and ``torch._int_mm``: where oneDNN's int8 GEMM is the slower, a ceiling from it alone would put the
    floors below what a variant reaches."""
    from vlabench.errors import UnavailableError
    from vlabench.kernels import amx_int8

    path = amx_int8.runnable_path()
    if path is None:
        return None
    try:
        linear = amx_int8.Int8Linear(torch.nn.Linear(size, size, bias=False), path)
    except UnavailableError:
        return None
    x = torch.randn(size, size, dtype=amx_int8.float_dtype(path))
    with torch.inference_mode():
        seconds, repetitions = _best_seconds(lambda: linear(x), lambda: None, budget_s)
    return path, seconds, repetitions


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
    """GEMM peak per precision and the stream bandwidth; int4 has no GEMM of its own (its weights are unpacked to
    int8 or bf16 operands) and fp8's (``torch._scaled_mm``) needs fp8 tensor cores, so their rooflines rest on the
    bandwidth and the profile's quoted peak."""
    return [*(gemm_peak(p, device) for p in precisions if p in DTYPES), stream_bandwidth(device)]
