"""Memory: will the run fit (checked before allocating), and how much did the run use.

The estimate counts every buffer whose size depends on the model or the workload: the weights; the prefix K/V
cache; the largest transient activations of a phase (vision, prefill, one action step: its attention masks and
scores grow with chunk × (prefix + chunk)); the inputs (cameras × image size, chunk × action dimension, several
copies: the seeded variants, their fp32 creation and the reference's); the per-step timing records (steps ×
iterations); and the runtime: its own arena and libraries, and for exported graphs (onnxruntime, openvino,
tensorrt) the exporter's traced graph and the runtime's own copy of the weights.
``tests/integration/analysis/test_memory_estimate.py`` checks that the estimate is never below the peak RSS a run
adds, and at most 4× it, across workloads."""

from __future__ import annotations

import resource
import sys
from typing import NamedTuple

import psutil
import torch
from pydantic import BaseModel, Field

from vlabench.backends import BACKENDS
from vlabench.errors import InsufficientMemoryError
from vlabench.models.input_pipeline import CAMERA_FRAME
from vlabench.models.replicas import count_parameters, replica_class
from vlabench.models.specs import DecoderSpec, FlowVLASpec, ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision

HEADROOM = 1.15  # allocator fragmentation and framework buffers on top of the estimate
EXPORTED_SCORE_COPIES = 8
"""Attention-score-sized buffers an exported graph's runtime holds at once (the product, the masked sum, the
softmax, the mask; its arena rounds each up): onnxruntime measured 6-7, whatever the number of layers."""
INPUT_VARIANTS = 2  # seeded observations per run (``commands.run.INPUT_VARIANTS``)
SPAN_BYTES = 256  # one timing span kept per phase and denoising step of each inference: sample, event, list slots
SPANS_PER_INFERENCE = 8  # phases and the end-to-end spans besides the per-step ones
TRACE_SHARE = 16
"""Tracing a replica allocates its inputs on the host: only when they take at most 1/16 of its free memory, so the
estimate itself can never exhaust memory."""
FLOAT = 4  # scores, softmax and the fp32 copies of inputs are fp32 whatever the run's precision
QUANT_OVERHEAD = 0.125
"""Quantized weights' scales and zero points (int4 groups of 32-128: 2-12%; int8 per channel: < 1%)."""


class Footprint(BaseModel):
    """Estimated resident bytes of one run (batch from the workload)."""

    params: int
    weights_bytes: int
    kv_cache_bytes: int
    activation_bytes: int = Field(description="the largest transient activations of one phase")
    buffer_bytes: int = Field(default=0, description="inputs, action-loop state, timing records, K/V staging")
    runtime_bytes: int = Field(default=0, description="runtime arena and libraries; exported graphs' weight copies")
    total_bytes: int


def estimate_footprint(
    spec: ModelSpec,
    workload: Workload,
    precision: str,
    backend: str = "torch",
    iterations: int = 1000,
    preprocess: bool = False,
) -> Footprint:
    """Every shape-dependent buffer of a run of ``backend`` with up to ``iterations`` timed inferences, and with
    ``preprocess`` its input pipeline's camera frames (see the module docstring). Flow-matching VLAs are counted
    analytically; the other families from their traced operators (twice the largest one's activations), unless the
    inputs the trace creates would take over 1/TRACE_SHARE of this host's free memory: such a workload is not
    traced, and counted as more than the host has."""
    float_precision = "fp32" if Precision.is_quantized(precision) else precision  # quantized: fp32 activations
    size = int(Precision.BYTES[float_precision])
    params = count_parameters(spec)
    weights = weight_bytes(spec, precision)
    buffers = input_bytes(workload, size) + iterations * (workload.steps + SPANS_PER_INFERENCE) * SPAN_BYTES
    if preprocess:
        buffers += pipeline_bytes(workload)
    known = BACKENDS.get(backend)
    exported = known.exports_graphs if known else True  # a backend not registered here: counted at the most
    if isinstance(spec, FlowVLASpec):
        kv_cache, activations = flow_vla_terms(spec, workload, size, exported)
        buffers += kv_cache + joint_kv_bytes(spec, workload, size)  # the per-layer K/V before they are stacked
    elif trace_input_bytes(workload) * TRACE_SHARE > psutil.virtual_memory().available:
        kv_cache, activations = 0, trace_input_bytes(workload) * TRACE_SHARE  # untraced: more than the host has
    else:
        from vlabench.analysis.flops_traced import trace_operators

        ops = trace_operators(spec, workload, float_precision)
        kv_cache = int(max(op.kv_read_bytes for op in ops))
        activations = int(2 * max(op.activation_bytes for op in ops))
        buffers += kv_cache
    exporter_copies = 2 * (params * FLOAT if Precision.is_quantized(precision) else weights)  # quantized from fp32
    most = max(cls.runtime_bytes for cls in BACKENDS.values())
    runtime = (known.runtime_bytes if known else most) + (exporter_copies if exported else 0)
    return Footprint(
        params=params,
        weights_bytes=weights,
        kv_cache_bytes=kv_cache,
        activation_bytes=activations,
        buffer_bytes=buffers,
        runtime_bytes=runtime,
        total_bytes=int((weights + kv_cache + activations + buffers + runtime) * HEADROOM),
    )


def weight_bytes(spec: ModelSpec, precision: str) -> int:
    """The weights at ``precision``. Quantized: the Linear layers at ``Precision.BYTES`` plus their scales
    (QUANT_OVERHEAD), everything else (embeddings, norms, convolutions) at fp32, plus one Linear layer at fp32 (the
    quantized build fills and quantizes one layer at a time)."""
    params = count_parameters(spec)
    if not Precision.is_quantized(precision):
        return int(params * Precision.BYTES[precision])
    linear, largest = linear_parameters(spec)
    quantized = linear * Precision.BYTES[precision] * (1 + QUANT_OVERHEAD)
    return int(quantized + (params - linear) * FLOAT + largest * FLOAT)


def linear_parameters(spec: ModelSpec) -> tuple[int, int]:
    """(Weights in the replica's Linear layers, the largest one's), counted on the meta device."""
    with torch.device("meta"):
        model = replica_class(spec)(spec)
    sizes = [module.weight.numel() for module in model.modules() if isinstance(module, torch.nn.Linear)]
    return sum(sizes), max(sizes, default=0)


def pipeline_bytes(workload: Workload) -> int:
    """The input pipeline's camera frames: every seeded input's raw uint8 frames, and while one is preprocessed its
    float copy and the resize's working copy."""
    pixels = workload.batch * workload.cameras * workload.frames * 3 * CAMERA_FRAME[0] * CAMERA_FRAME[1]
    return INPUT_VARIANTS * pixels + 2 * pixels * FLOAT


def observation_elements(workload: Workload) -> int:
    """Image pixels and state values of one observation batch."""
    width = workload.image_width or workload.image_size
    images = workload.batch * workload.cameras * workload.frames * 3 * workload.image_size * width
    return images + workload.batch * workload.frames * workload.state_dim


def trace_input_bytes(workload: Workload) -> int:
    """What tracing a replica allocates on the host: one fp32 observation (and its random draw) and noise chunk."""
    noise = workload.batch * workload.chunk * workload.action_dim
    return 2 * FLOAT * (observation_elements(workload) + noise)


def input_bytes(workload: Workload, size: int) -> int:
    """The seeded observations and noise at the run's precision, their fp32 draws, the fp32 reference's copies,
    the language tokens and masks, and the action loop's state (x_t, velocity, the update, the kept actions)."""
    noise = workload.batch * workload.chunk * workload.action_dim
    per_copy = observation_elements(workload) + noise
    language = workload.batch * workload.language_tokens * (8 + 1)  # int64 ids and a bool mask
    return INPUT_VARIANTS * (per_copy * (size + 2 * FLOAT) + 2 * language) + 4 * noise * FLOAT


def joint_kv_bytes(spec: FlowVLASpec, workload: Workload, size: int) -> int:
    """``--fuse-expert-kv``'s static [prefix ; suffix] K/V buffers of every expert layer."""
    expert, tokens = spec.expert, workload.prefix_tokens + workload.suffix_tokens
    return 2 * expert.layers * workload.batch * expert.kv_heads * tokens * expert.head_dim * size


def flow_vla_terms(spec: FlowVLASpec, workload: Workload, size: int, exported: bool) -> tuple[int, int]:
    """(K/V cache, the largest transient activations) of a flow-matching VLA: the vision tower over every image,
    the prefill over the prefix, or one denoising step of the expert over the chunk."""
    llm, vision, expert = spec.llm, spec.vision, spec.expert
    batch, prefix, suffix = workload.batch, workload.prefix_tokens, workload.suffix_tokens
    kv_cache = 2 * llm.layers * batch * llm.kv_heads * prefix * llm.head_dim * size
    images, patches = batch * workload.cameras * workload.frames, vision.patches_per_camera
    tower = Attention(vision.heads, vision.heads, vision.hidden // vision.heads, vision.hidden, vision.intermediate)
    vision_peak = tower.bytes(images, patches, patches, size, exported, masked=False)
    prefill_peak = Attention.of(llm).bytes(batch, prefix, prefix, size, exported)
    step_peak = Attention.of(expert).bytes(batch, suffix, prefix + suffix, size, exported)
    step_peak += batch * suffix * suffix + mask_bytes(batch * suffix * prefix, size)  # suffix-only, cross masks
    return kv_cache, max(vision_peak, prefill_peak, step_peak)


def mask_bytes(elements: int, size: int) -> int:
    """An additive attention mask built from a boolean one: the boolean, its negation, the zeros and the result."""
    return elements * (2 + 2 * size)


class Attention(NamedTuple):
    """The widths of a transformer's layers, for the transient memory of one pass."""

    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int

    @classmethod
    def of(cls, spec: DecoderSpec) -> Attention:
        return cls(spec.heads, spec.kv_heads, spec.head_dim, spec.hidden, spec.intermediate)

    def bytes(self, batch: int, queries: int, keys: int, size: int, exported: bool, masked: bool = True) -> int:
        """One pass of ``queries`` tokens over ``keys``: the additive mask; the attention scores (once, for an
        attention kernel's math fallback; EXPORTED_SCORE_COPIES times in an exported graph's runtime); hidden states
        and MLP intermediates; keys and values expanded to every query head."""
        masks = mask_bytes(batch * queries * keys, size) if masked else 0
        scores = batch * self.heads * queries * keys * FLOAT * (EXPORTED_SCORE_COPIES if exported else 1)
        widths = 3 * self.intermediate + 6 * self.hidden + 4 * self.heads * self.head_dim
        expanded = 2 * batch * (self.heads + self.kv_heads) * keys * self.head_dim * size
        return masks + scores + batch * queries * widths * size + expanded


def available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return int(psutil.virtual_memory().available)


def check_fits(spec: ModelSpec, footprint: Footprint, device: torch.device, precision: str) -> None:
    """Refuse, with the numbers, a run whose estimated footprint exceeds the target's free memory."""
    available = available_bytes(device)
    if footprint.total_bytes > available:
        gib = 1024**3
        raise InsufficientMemoryError(
            f"{spec.name} at {precision} needs about {footprint.total_bytes / gib:.1f} GiB on {device} "
            f"(weights {footprint.weights_bytes / gib:.1f} GiB for {footprint.params / 1e9:.2f}B parameters, "
            f"K/V cache {footprint.kv_cache_bytes / gib:.2f} GiB, activations {footprint.activation_bytes / gib:.2f} "
            f"GiB, inputs and buffers {footprint.buffer_bytes / gib:.2f} GiB, runtime "
            f"{footprint.runtime_bytes / gib:.2f} GiB, +{(HEADROOM - 1) * 100:.0f}% headroom) but only "
            f"{available / gib:.1f} GiB is available. Try a smaller --chunk or fewer --cameras, a lower precision "
            "(--precision bf16, or int8/int4 on the torch and onnxruntime backends), or a smaller model."
        )


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def check_fits_together(spec: ModelSpec, footprints: list[Footprint], device: torch.device, precision: str) -> None:
    """Refuse, with the numbers, replicas that would not fit in the target's free memory at once (the first
    footprint's breakdown, their sum as the total)."""
    combined = footprints[0].model_copy(update={"total_bytes": sum(footprint.total_bytes for footprint in footprints)})
    check_fits(spec, combined, device, precision)


DEPLOYED_FLOAT = 2
"""Bytes per element of what a quantized deployment keeps in floating point (embeddings, norms, activations): its
16-bit compute precision, as torchao's weight-only layers, TensorRT's int8/fp8 engines and ggml run them."""


def deployment_footprint(
    spec: ModelSpec, workload: Workload, precision: str, runtime_bytes: int, traced: tuple[int, int] | None = None
) -> int:
    """Resident bytes of the model deployed at ``precision`` by a stack whose runtime holds ``runtime_bytes``: the
    weights (quantized Linear layers at their bytes plus scales, everything else at 16 bits; float precisions whole),
    the prefix K/V cache and the largest transient activations at the precision the stack computes in (16 bits for a
    quantized deployment), without vlabench's own measuring buffers (seeded input copies, timing records) or an
    exporter's build-time copies. ``traced``: (K/V, activation) bytes of a traced family at fp32."""
    quantized = Precision.is_quantized(precision)
    size = DEPLOYED_FLOAT if quantized else int(Precision.BYTES[precision])
    params, linear = parameter_split(spec)
    if quantized:
        weights = int(linear * Precision.BYTES[precision] * (1 + QUANT_OVERHEAD) + (params - linear) * DEPLOYED_FLOAT)
    else:
        weights = int(params * size)
    if isinstance(spec, FlowVLASpec):
        kv_cache, activations = flow_vla_terms(spec, workload, size, exported=False)
    else:
        kv_cache, activations = (int(part * size / FLOAT) for part in (traced or (0, 0)))
    inputs = (observation_elements(workload) + workload.batch * workload.chunk * workload.action_dim) * size
    return int((weights + kv_cache + activations + inputs + runtime_bytes) * HEADROOM)


_SPLITS: dict[str, tuple[int, int]] = {}


def parameter_split(spec: ModelSpec) -> tuple[int, int]:
    """(every parameter, those in Linear layers) of the replica, counted once per spec in a process."""
    if spec.spec_hash not in _SPLITS:
        _SPLITS[spec.spec_hash] = (count_parameters(spec), linear_parameters(spec)[0])
    return _SPLITS[spec.spec_hash]


def traced_terms(spec: ModelSpec, workload: Workload) -> tuple[int, int] | None:
    """(K/V, activation) bytes at fp32 of a family counted from its traced operators (None: counted analytically)."""
    if isinstance(spec, FlowVLASpec):
        return None
    from vlabench.analysis.flops_traced import trace_operators

    ops = trace_operators(spec, workload, "fp32")
    return int(max(op.kv_read_bytes for op in ops)), int(2 * max(op.activation_bytes for op in ops))
