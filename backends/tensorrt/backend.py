"""TensorRT engines built from the exported fp32 ONNX graphs, cached on disk, run on torch CUDA buffers."""

from __future__ import annotations

import functools
import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from vlabench.atomic import staging_file
from vlabench.backends.base import Backend, BackendOptions, GraphPolicy, PreparedPolicy
from vlabench.backends.onnx_export import cache_root, load_cache_class, timed_export
from vlabench.errors import UnavailableError
from vlabench.hardware.targets import ExecutionTarget
from vlabench.measure.cold_start import stage
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload

NOT_INSTALLED = "tensorrt is not installed (pip install tensorrt on a CUDA host)"
NO_GPU = "TensorRT needs a CUDA GPU; none is visible"
TORCH_DTYPES = {
    "FLOAT": torch.float32,
    "HALF": torch.float16,
    "BF16": torch.bfloat16,
    "INT8": torch.int8,
    "UINT8": torch.uint8,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "BOOL": torch.bool,
    "FP8": torch.float8_e4m3fn,
}
BUILDER_FLAGS = {"fp32": {"TF32": False}, "fp16": {"FP16": True}, "bf16": {"BF16": True}}  # set or cleared


def _tensorrt() -> Any:
    try:
        import tensorrt
    except ImportError as error:
        missing = isinstance(error, ModuleNotFoundError) and error.name == "tensorrt"
        raise UnavailableError(NOT_INSTALLED if missing else f"tensorrt failed to import: {error}") from None
    return tensorrt


@functools.cache
def _logger() -> Any:
    """One logger per process: TensorRT keeps the first one it is given."""
    trt = _tensorrt()
    return trt.Logger(trt.Logger.WARNING)


def torch_dtype(trt_dtype: Any) -> torch.dtype:
    """The torch dtype of a ``tensorrt.DataType`` member, matched by its name."""
    if trt_dtype.name not in TORCH_DTYPES:
        raise UnavailableError(f"TensorRT tensor type {trt_dtype.name} has no torch equivalent")
    return TORCH_DTYPES[trt_dtype.name]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def engine_cache_key(onnx_folder: str, precision: str, trt_version: str, gpu_name: str) -> str:
    """Everything an engine depends on: the exported graphs, the precision, TensorRT and the GPU it was tuned on."""
    return f"{onnx_folder}-{precision}-trt{trt_version}-{_slug(gpu_name)}"


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = staging_file(path.parent, f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


def parse_onnx(parser: Any, path: Path) -> None:
    """Fill the parser's network from ``path``; parse errors are listed in an UnavailableError."""
    if not parser.parse_from_file(str(path)):
        errors = "; ".join(str(parser.get_error(index)) for index in range(parser.num_errors))
        raise UnavailableError(f"TensorRT cannot parse {path.name}: {errors}")


class EngineRunner:
    """One engine and its execution context; inputs and outputs are torch tensors on the engine's GPU."""

    def __init__(self, trt: Any, engine: Any, device: torch.device) -> None:
        self.engine = engine
        self.context = engine.create_execution_context()
        self.device = device
        names = [engine.get_tensor_name(index) for index in range(engine.num_io_tensors)]
        is_input = {name: engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT for name in names}
        self.inputs = {name: torch_dtype(engine.get_tensor_dtype(name)) for name in names if is_input[name]}
        self.outputs = {
            name: (tuple(engine.get_tensor_shape(name)), torch_dtype(engine.get_tensor_dtype(name)))
            for name in names
            if not is_input[name]
        }

    def __call__(self, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        """Queue one execution on the current stream; the exporter may have dropped inputs the graph ignores."""
        bound = {name: feeds[name].to(self.device, dtype).contiguous() for name, dtype in self.inputs.items()}
        outputs = {
            name: torch.empty(shape, dtype=dtype, device=self.device) for name, (shape, dtype) in self.outputs.items()
        }
        for name, tensor in {**bound, **outputs}.items():
            self.context.set_tensor_address(name, tensor.data_ptr())
        if not self.context.execute_async_v3(torch.cuda.current_stream(self.device).cuda_stream):
            raise RuntimeError("TensorRT failed to enqueue the engine")
        return outputs


class TensorRtPolicy(GraphPolicy):
    def __init__(
        self,
        runtime: Any,
        engines: dict[str, EngineRunner],
        device: torch.device,
        details: dict[str, Any],
        graphs: dict[str, tuple[list[str], list[str]]],
        cache_type: type,
    ):
        super().__init__(details, graphs, cache_type)
        self.runtime = runtime  # outlives the engines it deserialized
        self.engines = engines
        self.device = device

    def run_graph(self, graph: str, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        return self.engines[graph](feeds)

    def executed_on(self) -> ExecutionTarget:
        return ExecutionTarget(engine="cuda", device=str(self.device), source="CUDA device the engines were built on")

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


class TensorRtBackend(Backend):
    exports_graphs = True
    runtime_bytes = 1024 * 2**20  # the builder's workspace
    name = "tensorrt"
    runtime_library = "tensorrt"
    engines: ClassVar[dict[str, str]] = {"cuda": "on CUDA (TensorRT engines)"}

    @classmethod
    def route(cls, engine: str, options: BackendOptions) -> tuple[torch.device, BackendOptions]:
        return torch.device("cuda:0"), options

    def unavailable_reason(self, device: torch.device) -> str | None:
        try:
            _tensorrt()
        except UnavailableError as error:
            return str(error)
        if not torch.cuda.is_available():
            return NO_GPU
        if device.type != "cuda":
            return f"TensorRT runs on a CUDA device, not {device}"
        return None

    def precisions(self, device: torch.device) -> tuple[str, ...]:
        return ("fp32", "fp16", "bf16")

    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> PreparedPolicy:
        """Export fp32 ONNX, build (or reuse) one engine per graph at ``precision``, deserialize and bind them."""
        reason = self.unavailable_reason(device)
        if reason is not None:
            raise UnavailableError(reason)
        trt = _tensorrt()
        exported = timed_export(spec, workload, "fp32", seed)
        gpu = torch.cuda.get_device_name(device)
        root = cache_root() / "tensorrt"
        engine_folder = root / "engines" / engine_cache_key(exported.folder.name, precision, trt.__version__, gpu)
        timing_cache = root / f"timing-trt{trt.__version__}-{_slug(gpu)}.cache"
        runtime = trt.Runtime(_logger())
        engines: dict[str, EngineRunner] = {}
        reused: dict[str, bool] = {}
        build_s: dict[str, float] = {}
        with torch.cuda.device(device):
            for graph in exported.graphs:
                path = engine_folder / f"{graph}.engine"
                reused[graph] = path.exists()
                with stage("engine_build") as timed:  # a reused engine: its deserialization only
                    timed.cached = reused[graph]
                    if not reused[graph]:
                        start = time.perf_counter()
                        _build_engine(trt, exported.graph(graph), path, precision, timing_cache)
                        build_s[graph] = time.perf_counter() - start
                    engine = runtime.deserialize_cuda_engine(path.read_bytes())
                if engine is None:
                    raise UnavailableError(f"TensorRT could not deserialize {path}")
                engines[graph] = EngineRunner(trt, engine, device)
        details = {
            "tensorrt": trt.__version__,
            "gpu": gpu,
            "precision_flags": BUILDER_FLAGS[precision],
            "onnx_folder": str(exported.folder),
            "onnx_reused": exported.reused,
            "engine_folder": str(engine_folder),
            "timing_cache": str(timing_cache),
            "engines_reused": reused,
            "build_s": build_s,
        }
        cache_type = load_cache_class(exported.cache_class)
        return TensorRtPolicy(runtime, engines, device, details, exported.graphs, cache_type)


def _build_engine(trt: Any, onnx_path: Path, path: Path, precision: str, timing_cache: Path) -> None:
    """Build one engine and save it atomically, loading the persisted timing cache first and saving it after."""
    builder = trt.Builder(_logger())
    major = int(trt.__version__.split(".")[0])
    explicit_batch = 0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(explicit_batch)
    parser = trt.OnnxParser(network, _logger())  # owns the weights: must live until the build is done
    parse_onnx(parser, onnx_path)
    config = builder.create_builder_config()
    for name, enabled in BUILDER_FLAGS[precision].items():
        flag = getattr(trt.BuilderFlag, name, None)
        if flag is None:
            raise UnavailableError(f"TensorRT {trt.__version__} has no {name} builder flag")
        (config.set_flag if enabled else config.clear_flag)(flag)
    cache = config.create_timing_cache(timing_cache.read_bytes() if timing_cache.exists() else b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise UnavailableError(f"TensorRT failed to build an engine from {onnx_path}")
    _write_atomic(timing_cache, bytes(config.get_timing_cache().serialize()))
    _write_atomic(path, bytes(serialized))
