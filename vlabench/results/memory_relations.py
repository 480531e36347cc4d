"""Memory: the weights take at least their parameters at the stored precision, the run's peak holds its weights, and
the peak fits in the device."""

from __future__ import annotations

from vlabench.results.relation_terms import RELATIVE, Problems, RunResult
from vlabench.vocab import Precision

MEMORY_MARGIN = 1.1
"""A memory peak may exceed the recorded device memory by 10% (GB against GiB, shared memory counted twice)."""
MAX_MEMORY_BYTES = 1e15
"""1 PB: no host or device under test has more memory."""


def memory_relations(result: RunResult) -> Problems:
    """A memory peak fits in the device (the host's RAM for a CPU or a unified-memory SoC; the accelerator's memory
    for what CUDA allocated) and holds the weights, which take at least a parameter count's bytes at the stored
    precision."""
    memory, device, model, found = result.memory, result.device, result.model, []
    limit = device.memory_gb * 1e9 * MEMORY_MARGIN if device.memory_gb else MAX_MEMORY_BYTES
    shared = device.torch_device.startswith("cpu") or device.kind == "soc"
    peaks = [("cuda_max_allocated_bytes", memory.cuda_max_allocated_bytes)]
    if shared:
        peaks.append(("peak_rss_bytes", memory.peak_rss_bytes))
    for field, peak in peaks:
        if peak is not None and peak > limit:
            where = f"the device's {device.memory_gb:g} GB" if device.memory_gb else "1 PB"
            found.append((f"memory.{field}", f"memory within the device: a {peak / 1e9:g} GB peak exceeds {where}"))
    if not shared and memory.peak_rss_bytes > MAX_MEMORY_BYTES:
        found.append(("memory.peak_rss_bytes", f"memory within the host: {memory.peak_rss_bytes / 1e9:g} GB"))
    if memory.params != model.params:
        found.append(
            (
                "memory.params",
                f"weights of the model: {memory.params} parameters in memory, the model has {model.params}",
            )
        )
    bytes_each = Precision.BYTES.get(result.precision)
    if bytes_each is not None and memory.weights_bytes < model.params * bytes_each * (1 - RELATIVE):
        found.append(
            (
                "memory.weights_bytes",
                f"weights at the stored precision: {memory.weights_bytes / 1e6:g} MB for {model.params} parameters "
                f"at {result.precision} ({bytes_each:g} bytes each: at least {model.params * bytes_each / 1e6:g} MB)",
            )
        )
    peak = max(memory.peak_rss_bytes, memory.cuda_max_allocated_bytes or 0)
    if peak < memory.weights_bytes * (1 - RELATIVE):
        found.append(
            (
                "memory.peak_rss_bytes",
                f"memory holds the weights: a {peak / 1e6:g} MB peak (host or device) below the "
                f"{memory.weights_bytes / 1e6:g} MB of weights the run held",
            )
        )
    if memory.estimated_total_bytes < memory.weights_bytes:
        found.append(
            (
                "memory.estimated_total_bytes",
                f"memory holds the weights: an estimate of {memory.estimated_total_bytes / 1e6:g} MB below its own "
                f"{memory.weights_bytes / 1e6:g} MB of weights",
            )
        )
    return found
