"""INT8 and INT4 OpenVINO graphs through NNCF, cached like the exported ones.

Schemes (the ``quantization`` entry of a result's backend details says which ran):

- ``int8`` / ``ptq`` (default): NNCF post-training quantization (``nncf.quantize``, transformer model type):
  weights int8 symmetric per channel, activations int8 at the inputs of matmuls, with ranges from calibration
  samples. The samples are the graphs' own inputs while the fp32 graphs sample action chunks for observations
  and noise from the seeded generator every run uses (``synthetic_observation`` / ``initial_noise``), at seeds
  ``seed + CALIBRATION_SEED_OFFSET ...``: never the measured inputs (``seed``, ``seed + 1``).
  On CPUs without VNNI or AMX (their int8 kernels multiply with AVX2's ``VPMADDUBSW``, whose int16 pair sums
  saturate for full-range weights) NNCF's overflow fix applies to every layer, not only the first (``overflow_fix``).
- ``int8`` / ``weights``: NNCF weight compression ``INT8_ASYM`` (weight-only, per channel; activations f32).
- ``int4`` / ``weights``: NNCF weight compression ``INT4_SYM``, groups of ``INT4_GROUP_SIZES[0]`` (or the largest
  size dividing every compressed matmul's input width), every eligible layer at int4 (ratio 1) except what NNCF
  keeps at its int8 backup (embeddings and the last layer, ``all_layers=False``). The CPU plugin may quantize the
  activations entering those matmuls to int8 at run time (``DYNAMIC_QUANTIZATION_GROUP_SIZE``, recorded).

The precision-sensitive ops ``openvino.ir`` pins to f32 are left out of quantization (an ignored scope).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vlabench.backends.onnx_export import cache_root
from vlabench.backends.openvino.ir import IR_FORMAT, IrModel, cached_ir, ir_key, openvino_version
from vlabench.errors import UnavailableError
from vlabench.hardware.detection import INT8_DOT_FLAGS, read_cpu_flags

OVERFLOW_FIX_WORDS = {"enable": ": every layer's weights in 7 bits, for VPMADDUBSW's int16 sums"}
CALIBRATION_SEED_OFFSET = 1_000_003  # calibration observations start here past the run's seed
CALIBRATION_OBSERVATIONS = 8  # observations sampled for PTQ ranges (each gives one sample per graph call)
INT4_GROUP_SIZES = (128, 64, 32)
SCHEMES = {"int8": ("ptq", "weights"), "int4": ("weights",)}
DEFAULT_SCHEME = {"int8": "ptq", "int4": "weights"}
QUANTIZE_FORMAT = 2  # bump when how a graph is quantized changes (2: the PTQ fallback keeps element-wise ops float)
FLOAT_IN_FALLBACK = ("Add", "Multiply", "Subtract", "Divide", "Power", "Sqrt", "ReduceMean", "Gather", "Concat")
"""Op types NNCF's default model type would quantize that stay float when PTQ falls back to it."""

Calibration = dict[str, list[dict[str, np.ndarray]]]  # graph -> its input feeds, one dict per call


def nncf_missing() -> str | None:
    """None when NNCF is importable, else how to get it."""
    if importlib.util.find_spec("nncf") is None:
        return "quantized OpenVINO runs need NNCF: pip install nncf"
    return None


def _nncf() -> Any:
    reason = nncf_missing()
    if reason:
        raise UnavailableError(reason)
    import nncf

    nncf.set_log_level(logging.WARNING)  # its per-operator INFO lines would bury the run's own output
    return nncf


def check_scheme(precision: str, scheme: str) -> str:
    if scheme not in SCHEMES[precision]:
        raise UnavailableError(
            f"OpenVINO {precision} has no scheme '{scheme}'; schemes: {', '.join(SCHEMES[precision])}"
        )
    return scheme


def overflow_fix() -> str:
    """NNCF's overflow fix for PTQ weights: on CPUs without an int8 dot product into int32 (no VNNI or AMX), the
    int8 kernels multiply with AVX2's ``VPMADDUBSW``, whose int16 pair sums saturate for full-range weights, so every
    layer's weights take the 7-bit range ("enable"); elsewhere NNCF's default ("first_layer_only")."""
    return "first_layer_only" if read_cpu_flags() & INT8_DOT_FLAGS else "enable"


def scheme_identity(precision: str, scheme: str, seed: int) -> dict[str, Any]:
    """Everything a quantized graph depends on beyond the float IR it came from."""
    identity: dict[str, Any] = {"precision": precision, "scheme": scheme}
    if scheme == "ptq":
        identity["calibration"] = {
            "seed": seed + CALIBRATION_SEED_OFFSET,
            "observations": CALIBRATION_OBSERVATIONS,
            "generator": "synthetic_observation + initial_noise",
        }
        identity["overflow_fix"] = overflow_fix()
    if precision == "int4":
        identity["group_sizes"] = list(INT4_GROUP_SIZES)
    return identity


def quantized_ir(
    source: IrModel,
    workload: dict[str, Any],
    precision: str,
    scheme: str,
    seed: int,
    calibrate: Callable[[int, int], Calibration],
) -> IrModel:
    """Quantize (or reuse) every graph of ``source``; ``calibrate(first_seed, count)`` is called only on a miss."""
    nncf = _nncf()
    identity = {
        "format": IR_FORMAT,
        "quantize_format": QUANTIZE_FORMAT,
        "source": source.folder.name,
        "workload": workload,
        **scheme_identity(precision, scheme, seed),
        "nncf": nncf.__version__,
        "openvino": openvino_version(),
    }
    folder = cache_root() / "openvino-ir" / f"{source.folder.name}-{precision}-{scheme}-{ir_key(identity)}"

    def build(staging: Path) -> dict[str, Any]:
        import openvino as ov

        core = ov.Core()
        feeds = calibrate(seed + CALIBRATION_SEED_OFFSET, CALIBRATION_OBSERVATIONS) if scheme == "ptq" else {}
        extra: dict[str, Any] = {"samples": {graph: len(items) for graph, items in feeds.items()}}
        groups, types = set(), {}
        for graph in source.meta["graphs"]:
            model = core.read_model(str(source.xml(graph)))
            ignored = nncf.IgnoredScope(names=source.marked.get(graph, []), validate=False)
            if scheme == "ptq":
                model, types[graph] = _ptq(nncf, core, model, feeds[graph], ignored, identity["overflow_fix"])
            elif precision == "int8":
                model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM, ignored_scope=ignored)
            else:
                group = int4_group_size(model)
                groups.add(group)
                model = nncf.compress_weights(
                    model, mode=nncf.CompressWeightsMode.INT4_SYM, group_size=group, ratio=1.0, ignored_scope=ignored
                )
            (staging / graph).mkdir()
            ov.save_model(model, str(staging / graph / f"{graph}.xml"), compress_to_fp16=False)
        if groups:
            extra["group_sizes"] = sorted(groups)
        if types:
            extra["model_types"] = types
        return extra

    meta = {**identity, "graphs": source.meta["graphs"], "kept_f32": source.marked}
    with contextlib.redirect_stdout(sys.stderr):  # NNCF's progress bars print to stdout: keep --json output clean
        return cached_ir(folder, meta, build)


def _ptq(
    nncf: Any, core: Any, model: Any, feeds: list[dict[str, np.ndarray]], ignored: Any, fix: str
) -> tuple[Any, str]:
    """NNCF PTQ with its transformer model type (the weight matmuls and the attention matmuls take int8 inputs;
    norms and element-wise ops stay float), or, where the CPU plugin cannot compile that result (it fails to fold
    SmolVLA's prefill), its default type restricted to the weight matmuls: attention matmuls and element-wise ops
    (``FLOAT_IN_FALLBACK``) float. The default type unrestricted quantized the residual adds and norms too: 0.38
    relative action error on smolvla-tiny, against 0.008 restricted. Keeping the attention matmuls float under the
    transformer type too was tried: no faster on SmolVLA's denoise step (39.6 against 40.6 ms p50, interleaved)
    and smolvla-tiny then missed the gate (cosine 0.9898 < 0.99), so the transformer type keeps its choice."""
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    dataset = nncf.Dataset(feeds)
    advanced = AdvancedQuantizationParameters(overflow_fix=OverflowFix(fix))
    quantized = nncf.quantize(
        model.clone(),
        dataset,
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(feeds),
        ignored_scope=ignored,
        advanced_parameters=advanced,
    )
    try:
        core.compile_model(quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return quantized, "transformer"
    except RuntimeError:
        names = [*ignored.names, *activation_matmuls(model)]
        scope = nncf.IgnoredScope(names=names, types=list(FLOAT_IN_FALLBACK), validate=False)
        fallback = nncf.quantize(
            model, dataset, subset_size=len(feeds), ignored_scope=scope, advanced_parameters=advanced
        )
        return fallback, "default, weight matmuls only"


def activation_matmuls(model: Any) -> list[str]:
    """Matmuls of two activations (attention scores and mixing), which the transformer model type leaves float."""
    weights = ("Constant", "Convert")
    return [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() == "MatMul"
        and all(port.get_source_output().get_node().get_type_name() not in weights for port in op.inputs())
    ]


def int4_group_size(model: Any) -> int:
    """The largest of ``INT4_GROUP_SIZES`` dividing the input width of every matmul with a constant weight."""
    widths = set()
    for op in model.get_ops():
        if op.get_type_name() != "MatMul":
            continue
        for index, port in enumerate(op.inputs()):
            if port.get_source_output().get_node().get_type_name() in ("Constant", "Convert"):
                shape = list(port.get_partial_shape().to_shape()) if port.get_partial_shape().is_static else []
                transposed = op.get_attributes().get(f"transpose_{'b' if index else 'a'}", False)
                if len(shape) >= 2:
                    widths.add(shape[-1] if transposed else shape[-2])
    return next((size for size in INT4_GROUP_SIZES if all(width % size == 0 for width in widths)), -1)


def describe(precision: str, scheme: str, meta: dict[str, Any]) -> str:
    """The scheme in words, for the result."""
    if scheme == "ptq":
        samples = ", ".join(f"{graph} {count}" for graph, count in meta.get("samples", {}).items())
        seed = meta["calibration"]["seed"]
        types = ", ".join(f"{graph} {kind}" for graph, kind in meta.get("model_types", {}).items())
        fix = meta.get("overflow_fix", "first_layer_only")
        return (
            "NNCF PTQ: weights int8 symmetric per channel, activations int8 (calibrated on "
            f"{meta['calibration']['observations']} seeded observations from seed {seed}; samples {samples}; NNCF "
            f"model type {types}; overflow fix {fix}{OVERFLOW_FIX_WORDS.get(fix, '')})"
        )
    if precision == "int8":
        return "NNCF weight compression INT8_ASYM: weights int8 asymmetric per channel, activations f32"
    groups = "/".join("per channel" if g == -1 else str(g) for g in meta.get("group_sizes", []))
    return (
        f"NNCF weight compression INT4_SYM: weights int4 symmetric, groups of {groups}, ratio 1.0 (embeddings and "
        "last layer at NNCF's int8 backup), activations f32 between layers"
    )
