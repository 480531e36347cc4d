"""ONNX Runtime over the exported graphs, with the execution provider chosen by ``--ep``."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from vlabench.backends.base import Backend, BackendOptions, GraphPolicy, NoOptions
from vlabench.backends.onnx_export import ExportedModel, load_cache_class, timed_export
from vlabench.backends.onnxruntime.quantize import (
    INT8_SCHEMES,
    calibration_feeds,
    check_scheme,
    nbits_available,
    quantize_exported,
    quantized_details,
)
from vlabench.errors import InputError, UnavailableError
from vlabench.hardware.targets import ENGINE_OF_ORT_PROVIDER, ExecutionTarget
from vlabench.measure.cold_start import stage
from vlabench.measure.policy import NodeEvent, PreparedPolicy
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision

EXECUTION_PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "cann": "CANNExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "qnn": "QNNExecutionProvider",
}
GPU_PROVIDERS = {"cuda", "tensorrt"}
EXPORT_PRECISION = {"fp32": "fp32", "fp16": "fp16", "int8": "fp32", "int4": "fp32"}  # quantized from fp32


def _numpy_type(dtype: torch.dtype) -> type:
    """The numpy element type ONNX Runtime's I/O binding names for a torch dtype."""
    return torch.empty(0, dtype=dtype).numpy().dtype.type


def _ort():
    try:
        import onnxruntime
    except ImportError:
        raise UnavailableError("backend 'onnxruntime' needs onnxruntime: pip install onnxruntime") from None
    return onnxruntime


class OrtPolicy(GraphPolicy):
    """ONNX Runtime sessions, one per graph. On a CUDA provider inputs and outputs stay in GPU memory through I/O
    binding (torch tensors bound by pointer), so timings are the GPU's and not host round trips; on the CPU
    provider host arrays go in and out (zero-copy for contiguous tensors)."""

    def __init__(
        self,
        sessions: dict[str, Any],
        device: torch.device,
        details: dict[str, Any],
        graphs,
        cache_type,
        bind_device: bool | None = None,
    ):
        super().__init__(details, graphs, cache_type)
        self.sessions = sessions
        self.device = device
        self.inputs = {name: {i.name for i in session.get_inputs()} for name, session in sessions.items()}
        self.bind_device = device.type == "cuda" if bind_device is None else bind_device
        self._outputs: dict[str, list[tuple[tuple[int, ...], torch.dtype]]] = {}

    def run_graph(self, graph: str, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        """Outputs come back on the device the inputs came from."""
        present = {name: value.detach() for name, value in feeds.items() if name in self.inputs[graph]}
        names = self.graphs[graph][1]
        if self.bind_device and graph in self._outputs:
            return self._run_bound(graph, present, names)
        device = next(iter(feeds.values())).device
        outputs = self.sessions[graph].run(names, {name: value.cpu().numpy() for name, value in present.items()})
        result = {name: torch.from_numpy(np.asarray(out)).to(device) for name, out in zip(names, outputs, strict=True)}
        self._outputs[graph] = [(tuple(value.shape), value.dtype) for value in result.values()]  # static shapes
        return result

    def _run_bound(self, graph: str, feeds: dict[str, Tensor], names: list[str]) -> dict[str, Tensor]:
        """Bind input and output buffers by pointer on the policy's device; no copy through host memory."""
        session, device = self.sessions[graph], self.device
        binding = session.io_binding()
        index = device.index or 0
        inputs = {name: value.to(device).contiguous() for name, value in feeds.items()}
        outputs = {
            name: torch.empty(shape, dtype=dtype, device=device)
            for name, (shape, dtype) in zip(names, self._outputs[graph], strict=True)
        }
        for bind, tensors in ((binding.bind_input, inputs), (binding.bind_output, outputs)):
            for name, value in tensors.items():
                bind(name, device.type, index, _numpy_type(value.dtype), tuple(value.shape), value.data_ptr())
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()  # torch wrote the inputs; ORT reads on its own stream
        session.run_with_iobinding(binding)
        if device.type == "cuda":
            binding.synchronize_outputs()
        return outputs

    def executed_on(self) -> ExecutionTarget:
        """The provider every session actually uses first (onnxruntime falls back to the CPU silently)."""
        used = {session.get_providers()[0] for session in self.sessions.values()}
        engines = {ENGINE_OF_ORT_PROVIDER.get(provider, "unknown") for provider in used}
        engine = engines.pop() if len(engines) == 1 else "mixed"
        return ExecutionTarget(engine=engine, device=", ".join(sorted(used)), source="onnxruntime session providers")

    def synchronize(self) -> None:
        """``run`` returns host arrays; only the copies back to a CUDA device can still be in flight."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def node_events(self) -> list[NodeEvent]:
        """Ends each session's profiler and reads its trace: ``ts`` is µs after the profiler's wall-clock start."""
        wall_minus_perf = time.time_ns() - time.perf_counter_ns()
        events = []
        for graph, session in self.sessions.items():
            if not session.get_session_options().enable_profiling:
                continue
            started = session.get_profiling_start_time_ns() - wall_minus_perf
            profile = Path(session.end_profiling())
            recorded = json.loads(profile.read_text())
            profile.unlink(missing_ok=True)
            for event in recorded:
                if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
                    continue
                args = event.get("args", {})
                start = started + int(event["ts"]) * 1000
                events.append(
                    NodeEvent(
                        graph=graph,
                        name=event["name"].removesuffix("_kernel_time"),
                        op_type=args.get("op_name", ""),
                        start_ns=start,
                        end_ns=start + int(event["dur"]) * 1000,
                        args={k: args[k] for k in ("provider", "input_type_shape", "output_type_shape") if k in args},
                    )
                )
        return events


class OnnxRuntimeOptions(NoOptions):
    ep: str | None = None  # one of EXECUTION_PROVIDERS; None: the engine's default
    profile_nodes: bool = False
    quant_scheme: str | None = None  # int8: one of INT8_SCHEMES; None: the first


class OnnxRuntimeBackend(Backend):
    profiles_nodes = True
    exports_graphs = True
    runtime_bytes = 128 * 2**20
    name = "onnxruntime"
    runtime_library = "onnxruntime"
    Options = OnnxRuntimeOptions
    engines: ClassVar[dict[str, str]] = {
        "cpu": "with --ep cpu",
        "cuda": "with --ep cuda or --ep tensorrt",
        "ascend-npu": "with --ep cann (an onnxruntime build with the CANN provider)",
    }
    default_ep: ClassVar[dict[str, str]] = {"cpu": "cpu", "cuda": "cuda", "ascend-npu": "cann"}
    int8_schemes: ClassVar[tuple[str, ...]] = INT8_SCHEMES

    @classmethod
    def route(cls, engine: str, options: BackendOptions) -> tuple[torch.device, BackendOptions]:
        """The provider decides the engine; inputs and outputs live on the CUDA device for the CUDA providers."""
        ep = options.ep or cls.default_ep[engine]
        reached = ENGINE_OF_ORT_PROVIDER.get(EXECUTION_PROVIDERS.get(ep, ""))
        if reached != engine:
            where = f"on {reached}" if reached else "on no engine vlabench can label"
            raise UnavailableError(f"--ep {ep} executes {where}, not on {engine}; use --ep {cls.default_ep[engine]}")
        device = torch.device("cuda:0") if engine == "cuda" else torch.device("cpu")
        return device, replace(options, ep=ep)

    @classmethod
    def from_options(cls, options: BackendOptions) -> OnnxRuntimeBackend:
        own = cls.own_options(options)
        return cls(own.ep, own.profile_nodes, own.quant_scheme or cls.int8_schemes[0])

    def __init__(self, ep: str | None = None, profile_nodes: bool = False, int8_scheme: str = "dynamic") -> None:
        """``int8_scheme``: ``dynamic`` or ``qdq`` (see ``onnxruntime.quantize.SCHEMES``)."""
        if ep is not None and ep not in EXECUTION_PROVIDERS:
            raise InputError(f"Unknown execution provider '{ep}'. Valid --ep values: {', '.join(EXECUTION_PROVIDERS)}.")
        self.ep = ep
        self.profile_nodes = profile_nodes
        self.int8_scheme = check_scheme("int8", int8_scheme)

    def provider_for(self, device: torch.device) -> str:
        return self.ep or ("cuda" if device.type == "cuda" else "cpu")

    def unavailable_reason(self, device: torch.device) -> str | None:
        ort = _ort()
        ep = self.provider_for(device)
        available = ort.get_available_providers()
        if EXECUTION_PROVIDERS[ep] not in available:
            names = [alias for alias, provider in EXECUTION_PROVIDERS.items() if provider in available]
            return f"execution provider '{ep}' is not in this onnxruntime build; available: {', '.join(names)}"
        if (ep in GPU_PROVIDERS) != (device.type == "cuda"):
            return f"--ep {ep} does not run on {device}"
        return None

    def precisions(self, device: torch.device) -> tuple[str, ...]:
        """fp16 on the GPU providers; int8 (and int4 where the MatMulNBits quantizer ships) on the CPU provider."""
        if self.provider_for(device) in GPU_PROVIDERS:
            return ("fp32", "fp16")
        if self.provider_for(device) != "cpu":
            return ("fp32",)
        return ("fp32", "int8", "int4") if nbits_available() else ("fp32", "int8")

    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> PreparedPolicy:
        ort = _ort()
        exported = timed_export(spec, workload, EXPORT_PRECISION[precision], seed)
        quantization: dict[str, Any] = {}
        if Precision.is_quantized(precision):
            scheme = self.int8_scheme if precision == "int8" else check_scheme(precision, None)
            fp32 = exported

            def calibration() -> dict[str, list[dict]]:
                sessions, cache_type = cpu_sessions(ort, fp32), load_cache_class(fp32.cache_class)
                policy = OrtPolicy(sessions, torch.device("cpu"), {}, fp32.graphs, cache_type)
                return calibration_feeds(policy, spec, workload, seed)

            with stage("quantize") as timed:
                exported, reused = quantize_exported(exported, scheme, calibration)
                timed.cached = reused
            quantization = quantized_details(scheme, exported.folder, reused)
        provider = EXECUTION_PROVIDERS[self.provider_for(device)]
        providers = [provider] if provider == "CPUExecutionProvider" else [provider, "CPUExecutionProvider"]
        profile_dir = Path(tempfile.mkdtemp(prefix="vlabench-ort-profile-")) if self.profile_nodes else None
        sessions = {}
        for graph in exported.graphs:
            options = self.session_options(ort, profile_dir, graph)
            with stage("compile"):  # session creation: graph optimization and kernel selection
                sessions[graph] = ort.InferenceSession(str(exported.graph(graph)), options, providers=providers)
        in_use = sessions["prefill"].get_providers()
        if provider not in in_use:
            raise UnavailableError(
                f"onnxruntime could not load {provider} (sessions fell back to {', '.join(in_use)}); check its "
                "libraries (e.g. CUDA/cuDNN versions for the CUDA provider) — refusing to report a CPU run as GPU"
            )
        details = {
            "onnxruntime": ort.__version__,
            "execution_provider": provider,
            "providers_in_use": in_use,
            "graph_optimization_level": "ORT_ENABLE_ALL",
            "intra_op_threads": options.intra_op_num_threads,
            "inter_op_threads": options.inter_op_num_threads,
            "node_profiling": self.profile_nodes,
            "onnx_folder": str(exported.folder),
            "onnx_reused": exported.reused,
            **quantization,
        }
        return OrtPolicy(sessions, device, details, exported.graphs, load_cache_class(exported.cache_class))

    @staticmethod
    def session_options(ort: Any, profile_dir: Path | None, graph: str) -> Any:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if profile_dir is not None:
            options.enable_profiling = True
            options.profile_file_prefix = str(profile_dir / graph)
        return options


def cpu_sessions(ort: Any, exported: ExportedModel) -> dict[str, Any]:
    """CPU-provider sessions over ``exported``'s graphs (the fp32 graphs a quantizer calibrates on)."""
    return {
        graph: ort.InferenceSession(
            str(exported.graph(graph)),
            OnnxRuntimeBackend.session_options(ort, None, graph),
            providers=["CPUExecutionProvider"],
        )
        for graph in exported.graphs
    }
