"""Analytic FLOPs and bytes of every operator of a flow-matching VLA replica, from its spec and token counts.

Conventions (the ones ``torch.utils.flop_counter.FlopCounterMode`` uses, so the two can be cross-checked):
a matrix product (M×K)·(K×N) is 2·M·K·N FLOP; attention is 4·S·T·head_dim per head (QKᵀ and AV); bias adds,
norms, softmax, RoPE, activations and residual adds count 0 FLOP. Bytes assume each operator reads its inputs and
weights once and writes its output once (no fusion, no cache reuse across operators): weights, activations, and
the prefix K/V cache (written by the prefill, read by every denoising step). Norm weights and the embedding rows
that are gathered count as weights; elementwise activations and residual adds are not counted.
"""

from __future__ import annotations

from vlabench.analysis.flops_traced import trace_operators
from vlabench.analysis.operators import Operator
from vlabench.models.specs import FlowVLASpec, ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import ModelPhase, Precision

HOISTABLE = ("k_proj(prefix)", "v_proj(prefix)")


class _Builder:
    """Collects operators of one phase; sizes are element counts, converted to bytes at the run precision."""

    def __init__(self, phase: ModelPhase, element_bytes: int) -> None:
        self.phase = phase
        self.b = element_bytes
        self.ops: list[Operator] = []
        self.block = ""
        self.layer: int | None = None

    def at(self, block: str, layer: int | None = None) -> _Builder:
        self.block, self.layer = block, layer
        return self

    def add(self, name: str, flops: float, weights: float, activations: float, kv_read: float = 0, kv_write: float = 0):
        self.ops.append(
            Operator(
                phase=self.phase,
                block=self.block,
                layer=self.layer,
                name=name,
                flops=flops,
                weight_bytes=weights * self.b,
                activation_bytes=activations * self.b,
                kv_read_bytes=kv_read * self.b,
                kv_write_bytes=kv_write * self.b,
            )
        )

    def linear(self, name: str, rows: int, fan_in: int, fan_out: int, bias: bool = False, input_is_kv: bool = False):
        """``rows`` tokens through a fan_in → fan_out matrix; a K/V-cache input counts as a cache read."""
        inputs = rows * fan_in
        self.add(
            name,
            flops=2 * rows * fan_in * fan_out,
            weights=fan_in * fan_out + (fan_out if bias else 0),
            activations=rows * fan_out + (0 if input_is_kv else inputs),
            kv_read=inputs if input_is_kv else 0,
        )

    def norm(self, name: str, rows: int, width: int, params: int) -> None:
        self.add(name, flops=0, weights=params, activations=2 * rows * width)

    def attention(
        self, batch: int, heads: int, kv_heads: int, head_dim: int, queries: int, keys: int, cached_keys: int = 0
    ) -> None:
        """Q over ``keys`` keys, of which ``cached_keys`` come from the prefix K/V cache (read, not activations)."""
        kv = 2 * batch * kv_heads * head_dim
        self.add(
            "attention",
            flops=4 * batch * heads * queries * keys * head_dim,
            weights=0,
            activations=2 * batch * heads * queries * head_dim + kv * (keys - cached_keys),
            kv_read=kv * cached_keys,
        )


def count_operators(spec: ModelSpec, workload: Workload, precision: str, hoisted: bool = False) -> list[Operator]:
    """Every operator of the vision, prefill and one action step, in execution order (traced on the meta device
    for families other than the flow-matching VLAs, see ``flops_traced``). ``hoisted``: the
    expert's projections of the prefix K/V (SmolVLA's cross layers) run once at the end of the prefill
    (``--fuse-expert-kv``) instead of in every step."""
    if not isinstance(spec, FlowVLASpec):
        return trace_operators(spec, workload, precision)
    element = Precision.BYTES[precision]
    denoise = _denoise(spec, workload, element)
    moved = [op.model_copy(update={"phase": "prefill"}) for op in denoise if hoisted and op.name in HOISTABLE]
    kept = [op for op in denoise if not (hoisted and op.name in HOISTABLE)]
    return [*_vision(spec, workload, element), *_prefill(spec, workload, element), *moved, *kept]


def _vision(spec: ModelSpec, workload: Workload, element: int) -> list[Operator]:
    v = spec.vision
    images = workload.batch * workload.cameras
    rows = images * v.patches_per_camera
    hidden, head_dim = v.hidden, v.hidden // v.heads
    ops = _Builder("vision", element).at("vision")
    patch_inputs = 3 * v.patch_size**2
    ops.add(
        "patch_embedding",
        flops=2 * rows * patch_inputs * hidden,
        weights=patch_inputs * hidden + hidden,
        activations=images * 3 * v.image_size**2 + rows * hidden,
    )
    ops.add("position_embedding", flops=0, weights=v.patches_per_camera * hidden, activations=2 * rows * hidden)
    for layer in range(v.layers):
        ops.at("vision", layer)
        ops.norm("layer_norm1", rows, hidden, 2 * hidden)
        for proj in ("q_proj", "k_proj", "v_proj"):
            ops.linear(proj, rows, hidden, hidden, bias=True)
        ops.attention(images, v.heads, v.heads, head_dim, v.patches_per_camera, v.patches_per_camera)
        ops.linear("out_proj", rows, hidden, hidden, bias=True)
        ops.norm("layer_norm2", rows, hidden, 2 * hidden)
        ops.linear("fc1", rows, hidden, v.intermediate, bias=True)
        ops.linear("fc2", rows, v.intermediate, hidden, bias=True)
    ops.at("vision").norm("post_layernorm", rows, hidden, 2 * hidden)
    ops.at("connector")
    tokens = images * v.tokens_per_camera
    if v.connector == "pixel_shuffle":
        ops.add("pixel_shuffle", flops=0, weights=0, activations=2 * rows * hidden)
        ops.linear("modality_projection", tokens, hidden * v.pixel_shuffle_factor**2, spec.llm.hidden)
    else:
        ops.linear("multi_modal_projector", tokens, hidden, spec.llm.hidden, bias=True)
    return ops.ops


def _prefill(spec: ModelSpec, workload: Workload, element: int) -> list[Operator]:
    llm, batch = spec.llm, workload.batch
    prefix = workload.prefix_tokens
    rows = batch * prefix
    ops = _Builder("prefill", element).at("llm")
    language = batch * workload.language_tokens
    ops.add("embed_tokens", flops=0, weights=language * llm.hidden, activations=language * llm.hidden)
    if spec.action.state_placement == "prefix_token":
        ops.linear("state_proj", batch, workload.state_dim, llm.hidden, bias=True)
    q_width, kv_width = llm.heads * llm.head_dim, llm.kv_heads * llm.head_dim
    for layer in range(llm.layers):
        ops.at("llm", layer)
        ops.norm("input_layernorm", rows, llm.hidden, llm.hidden)
        ops.linear("q_proj", rows, llm.hidden, q_width)
        ops.linear("k_proj", rows, llm.hidden, kv_width)
        ops.linear("v_proj", rows, llm.hidden, kv_width)
        ops.attention(batch, llm.heads, llm.kv_heads, llm.head_dim, prefix, prefix)
        ops.add("kv_cache_write", flops=0, weights=0, activations=0, kv_write=2 * rows * kv_width)
        ops.linear("o_proj", rows, q_width, llm.hidden)
        ops.norm("post_attention_layernorm", rows, llm.hidden, llm.hidden)
        _gated_mlp(ops, rows, llm.hidden, llm.intermediate)
    ops.at("llm").norm("norm", rows, llm.hidden, llm.hidden)
    return ops.ops


def _gated_mlp(ops: _Builder, rows: int, hidden: int, intermediate: int) -> None:
    ops.linear("gate_proj", rows, hidden, intermediate)
    ops.linear("up_proj", rows, hidden, intermediate)
    ops.linear("down_proj", rows, intermediate, hidden)


def _denoise(spec: ModelSpec, workload: Workload, element: int) -> list[Operator]:
    expert, llm, batch = spec.expert, spec.llm, workload.batch
    width, chunk = expert.hidden, workload.chunk
    prefix, suffix = workload.prefix_tokens, workload.suffix_tokens
    rows = batch * suffix
    adaptive = expert.time_conditioning == "adarms"
    ops = _Builder("denoise_step", element).at("head")
    ops.linear("action_in_proj", batch * chunk, workload.action_dim, width, bias=True)
    if adaptive:
        ops.linear("time_mlp_in", batch, width, width, bias=True)
        ops.linear("time_mlp_out", batch, width, width, bias=True)
    else:
        ops.linear("action_time_mlp_in", batch * chunk, 2 * width, width, bias=True)
        ops.linear("action_time_mlp_out", batch * chunk, width, width, bias=True)
    if spec.action.state_placement == "suffix_token":
        ops.linear("state_proj", batch, workload.state_dim, width, bias=True)
    q_width, kv_width = expert.heads * expert.head_dim, expert.kv_heads * expert.head_dim
    prefix_kv_width = llm.kv_heads * llm.head_dim

    def norm(name: str) -> None:
        if adaptive:
            ops.linear(f"{name}.dense", batch, width, 3 * width, bias=True)
            ops.norm(name, rows, width, 0)
        else:
            ops.norm(name, rows, width, width)

    for layer in range(expert.layers):
        ops.at("expert", layer)
        cross = expert.attention == "alternating_cross" and layer % expert.self_attn_every != 0
        norm("input_layernorm")
        ops.linear("q_proj", rows, width, q_width)
        if cross:
            prefix_rows = batch * prefix
            ops.linear("k_proj(prefix)", prefix_rows, prefix_kv_width, kv_width, input_is_kv=True)
            ops.linear("v_proj(prefix)", prefix_rows, prefix_kv_width, kv_width, input_is_kv=True)
            ops.attention(batch, expert.heads, expert.kv_heads, expert.head_dim, suffix, prefix)
        else:
            ops.linear("k_proj", rows, width, kv_width)
            ops.linear("v_proj", rows, width, kv_width)
            ops.attention(
                batch, expert.heads, expert.kv_heads, expert.head_dim, suffix, prefix + suffix, cached_keys=prefix
            )
        ops.linear("o_proj", rows, q_width, width)
        norm("post_attention_layernorm")
        _gated_mlp(ops, rows, width, expert.intermediate)
    ops.at("head")
    norm("norm")
    ops.linear("action_out_proj", batch * chunk, width, workload.action_dim, bias=True)
    return ops.ops
