"""Memory: will the model fit (checked before allocating), and how much did the run use."""

from __future__ import annotations

import resource
import sys

import psutil
import torch
from pydantic import BaseModel

from vlabench.errors import InsufficientMemoryError
from vlabench.models.replicas import count_parameters
from vlabench.models.specs import FlowVLASpec, ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision

HEADROOM = 1.15  # allocator fragmentation and framework buffers on top of the estimate


class Footprint(BaseModel):
    """Estimated resident bytes of one inference (batch from the workload)."""

    params: int
    weights_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    total_bytes: int


def estimate_footprint(spec: ModelSpec, workload: Workload, precision: str) -> Footprint:
    """Weights + prefix K/V cache + the largest transient activations (vision tower attention and MLP); for the
    families without an analytic model, the cache and activations are twice the largest traced operator's."""
    size = Precision.BYTES[precision]
    params = count_parameters(spec)
    weights = params * size
    if not isinstance(spec, FlowVLASpec):
        from vlabench.analysis.flops_traced import trace_operators

        ops = trace_operators(spec, workload, precision)
        kv_cache = int(max(op.kv_read_bytes for op in ops))
        activations = int(2 * max(op.activation_bytes for op in ops))
    else:
        llm, vision = spec.llm, spec.vision
        kv_cache = 2 * llm.layers * workload.batch * llm.kv_heads * workload.prefix_tokens * llm.head_dim * size
        images = workload.batch * workload.cameras
        patches = vision.patches_per_camera
        vision_peak = images * (patches * vision.intermediate + vision.heads * patches * patches) * size
        tokens = workload.prefix_tokens
        prefill_peak = workload.batch * (tokens * llm.intermediate * 2 + llm.heads * tokens**2) * size
        activations = 2 * max(vision_peak, prefill_peak)
    return Footprint(
        params=params,
        weights_bytes=weights,
        kv_cache_bytes=kv_cache,
        activation_bytes=activations,
        total_bytes=int((weights + kv_cache + activations) * HEADROOM),
    )


def available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return int(psutil.virtual_memory().available)


def check_fits(spec: ModelSpec, footprint: Footprint, device: torch.device, precision: str) -> None:
    """Refuse, with the numbers, a model whose estimated footprint exceeds the target's free memory."""
    available = available_bytes(device)
    if footprint.total_bytes > available:
        gib = 1024**3
        raise InsufficientMemoryError(
            f"{spec.name} at {precision} needs about {footprint.total_bytes / gib:.1f} GiB on {device} "
            f"(weights {footprint.weights_bytes / gib:.1f} GiB for {footprint.params / 1e9:.2f}B parameters, "
            f"K/V cache {footprint.kv_cache_bytes / gib:.2f} GiB, activations {footprint.activation_bytes / gib:.2f} "
            f"GiB, +{(HEADROOM - 1) * 100:.0f}% headroom) but only {available / gib:.1f} GiB is available. "
            "Try a lower precision (--precision bf16), fewer cameras, or a smaller model."
        )


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
