"""Quantized ONNX graphs through onnxruntime.quantization, cached next to the exported fp32 graphs.

Schemes (``SCHEMES``):

- ``dynamic`` (int8): ``quantize_dynamic``: weights int8 per-channel symmetric, activations uint8 per-tensor
  dynamic (scale computed at run time); MatMul/Gemm/Conv become MatMulInteger/ConvInteger.
- ``qdq`` (int8): ``quantize_static`` in the QDQ format: weights int8 per-channel, activations int8 per-tensor
  with static MinMax scales calibrated on the graphs' own inputs, recorded while the fp32 graphs run the action
  loop on seeded observations (``CALIBRATION_SEEDS``, disjoint from the measured ones).
- ``matmul-nbits`` (int4): ``MatMulNBitsQuantizer``: MatMul weights int4, symmetric blocks of 32 along the input
  dimension, fp32 activations (weight-only); MatMul becomes com.microsoft.MatMulNBits.

The quantized folder's name holds a key over everything it depends on: the exported graphs' folder (itself keyed
by spec, shapes, seed, torch and opset), the scheme and its settings, the calibration seeds and the onnxruntime
version. A change in any of them builds a new folder; an unchanged key reuses the old one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vlabench.atomic import publish_folder, staging_folder
from vlabench.backends.base import GraphPolicy
from vlabench.backends.onnx_export import ExportedModel, cache_root
from vlabench.errors import InputError
from vlabench.measure.action_loops import make_action_loop
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation

QUANT_FORMAT = "vlabench-ort-quant-2"  # bump when the quantizer settings below change
CALIBRATION_SEEDS = (1000, 1001)  # offsets from the run's seed: observations the calibration sees
NBITS_BLOCK = 32
QDQ_OPS = ["MatMul", "Gemm", "Conv"]
"""Static QDQ quantizes these and their activation inputs only: the additive attention masks (-inf or the dtype's
minimum) would otherwise set the per-tensor scales of the adds and softmaxes they feed, zeroing everything else."""
SCHEMES = {
    "dynamic": "onnxruntime dynamic int8 (weights int8 per-channel symmetric, activations uint8 per-tensor dynamic)",
    "qdq": "onnxruntime static QDQ int8 (weights int8 per-channel, activations int8 per-tensor, MinMax "
    f"calibration on {len(CALIBRATION_SEEDS)} seeded observations through the action loop)",
    "matmul-nbits": f"onnxruntime MatMulNBits int4 weight-only (symmetric blocks of {NBITS_BLOCK}, fp32 activations)",
}
PRECISION_OF = {"dynamic": "int8", "qdq": "int8", "matmul-nbits": "int4"}
DEFAULT_SCHEME = {"int8": "dynamic", "int4": "matmul-nbits"}
INT8_SCHEMES = tuple(name for name, bits in PRECISION_OF.items() if bits == "int8")  # the default (first) first
LARGE_GRAPH_BYTES = 1 << 30  # above this, quantized weights go to external data (protobuf's 2 GB limit)


def check_scheme(precision: str, scheme: str | None) -> str:
    """The scheme for ``precision`` (its default when None); InputError when it quantizes to something else."""
    chosen = scheme or DEFAULT_SCHEME[precision]
    if PRECISION_OF.get(chosen) != precision:
        valid = [name for name, bits in PRECISION_OF.items() if bits == precision]
        raise InputError(f"onnxruntime {precision} schemes: {', '.join(valid)}; not '{chosen}'")
    return chosen


def nbits_available() -> bool:
    """Whether this onnxruntime ships the MatMulNBits (int4) weight quantizer."""
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # noqa: F401
    except ImportError:
        return False
    return True


def quant_key(exported: ExportedModel, scheme: str, ort_version: str) -> str:
    """Everything a quantized folder depends on (see the module docstring)."""
    identity = {
        "format": QUANT_FORMAT,
        "exported": exported.folder.name,
        "scheme": scheme,
        "block": NBITS_BLOCK if scheme == "matmul-nbits" else None,
        "calibration": list(CALIBRATION_SEEDS) if scheme == "qdq" else None,
        "onnxruntime": ort_version,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def quantize_exported(
    exported: ExportedModel,
    scheme: str,
    calibration: Callable[[], dict[str, list[dict]]],
) -> tuple[ExportedModel, bool]:
    """(The quantized graphs, whether they were reused from the cache); the folder is filled atomically.
    ``calibration`` records the graphs' inputs (``calibration_feeds``); only the QDQ scheme calls it."""
    import onnxruntime

    key = quant_key(exported, scheme, onnxruntime.__version__)
    folder = cache_root() / "onnx-quantized" / f"{exported.folder.name}-{scheme}-{key}"
    if (folder / "meta.json").exists():
        return ExportedModel(folder, True, exported.graphs, exported.cache_class), True
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(folder.parent, ".partial-")
    try:
        feeds = calibration() if scheme == "qdq" else {}
        for graph in exported.graphs:
            (staging / graph).mkdir()
            _quantize_graph(exported.graph(graph), staging / graph / f"{graph}.onnx", scheme, feeds.get(graph, []))
        meta = json.loads((exported.folder / "meta.json").read_text())
        meta.update(scheme=scheme, quantization=SCHEMES[scheme], onnxruntime=onnxruntime.__version__, key=key)
        (staging / "meta.json").write_text(json.dumps(meta, indent=2))
        if not publish_folder(staging, folder):
            return ExportedModel(folder, True, exported.graphs, exported.cache_class), True
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExportedModel(folder, False, exported.graphs, exported.cache_class), False


def _quantize_graph(source: Path, target: Path, scheme: str, feeds: list[dict[str, Any]]) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # the quantizers' advice
    large = sum(path.stat().st_size for path in source.parent.iterdir()) > LARGE_GRAPH_BYTES
    if scheme == "dynamic":
        quantize_dynamic(source, target, per_channel=True, weight_type=QuantType.QInt8, use_external_data_format=large)
    elif scheme == "qdq":
        import onnx

        inputs = {value.name for value in onnx.load(str(source), load_external_data=False).graph.input}

        class Reader(CalibrationDataReader):  # the graph's own inputs (the exporter drops unused ones)
            def __init__(self) -> None:
                self.pending = ({name: value for name, value in feed.items() if name in inputs} for feed in feeds)

            def get_next(self) -> dict[str, Any] | None:
                return next(self.pending, None)

        quantize_static(
            source,
            target,
            Reader(),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=QDQ_OPS,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            use_external_data_format=large,
            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
        )
    else:
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), block_size=NBITS_BLOCK, is_symmetric=True)
        quantizer.process()
        quantizer.model.save_model_to_file(str(target), use_external_data_format=large)


def calibration_feeds(fp32: GraphPolicy, spec: ModelSpec, workload: Workload, seed: int) -> dict[str, list[dict]]:
    """Every input each fp32 graph receives while the action loop runs on the calibration observations."""
    recorded: dict[str, list[dict[str, Any]]] = {graph: [] for graph in fp32.graphs}
    run_graph = fp32.run_graph

    def recording(graph: str, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        recorded[graph].append({name: value.detach().cpu().numpy().copy() for name, value in feeds.items()})
        return run_graph(graph, feeds)

    fp32.run_graph = recording
    cpu = torch.device("cpu")
    loop = make_action_loop(spec, workload, cpu, None)
    for offset in CALIBRATION_SEEDS:
        obs = synthetic_observation(spec, workload, seed + offset, torch.float32, cpu)
        noise = initial_noise(workload, seed + offset, torch.float32, cpu)
        with torch.inference_mode():
            loop.sample(fp32, fp32.prefix(obs), noise)
    return recorded


def quantized_details(scheme: str, folder: Path, reused: bool) -> dict[str, Any]:
    """What a quantized ORT run records in its backend details."""
    return {"quantization": SCHEMES[scheme], "quantized_folder": str(folder), "quantized_reused": reused}
