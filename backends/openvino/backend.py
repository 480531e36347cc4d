"""OpenVINO over the exported fp32 graphs, on the OpenVINO device named by ``device_target`` (CPU, GPU.1, NPU, AUTO).

The graphs run from OpenVINO IR (``openvino.ir``: precision-sensitive ops pinned to f32); bf16 and fp16 are
OpenVINO's ``INFERENCE_PRECISION_HINT`` over the f32 IR, int8 and int4 are NNCF-quantized IR
(``openvino.quantize``); int8 runs at bf16 between the quantized ops where the device computes bf16 natively,
else f32, int4 at f32 (``OpenVinoBackend.inference_type``). Inputs and outputs stay f32 in the graphs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from pathlib import Path
from time import perf_counter_ns
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from vlabench.backends.base import Backend, BackendOptions, GraphPolicy, NoOptions
from vlabench.backends.onnx_export import cache_root, load_cache_class, timed_export
from vlabench.backends.openvino.ir import IrModel, float_ir, marks_honoured
from vlabench.backends.openvino.quantize import (
    DEFAULT_SCHEME,
    SCHEMES,
    Calibration,
    check_scheme,
    describe,
    nncf_missing,
    quantized_ir,
)
from vlabench.errors import UnavailableError
from vlabench.hardware.detection import INT8_DOT_FLAGS, NATIVE_BF16_FLAGS, NATIVE_FP16_FLAGS, read_cpu_flags
from vlabench.hardware.isa_cap import active_cap
from vlabench.hardware.targets import ExecutionTarget, openvino_engine
from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.cold_start import stage
from vlabench.measure.policy import NodeEvent, PreparedPolicy
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import Precision

ELEMENT_TYPES = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}
"""Float run precision -> OpenVINO inference precision (quantized graphs: ``OpenVinoBackend.inference_type``)."""
CAPABILITIES = {"FP32": "fp32", "BF16": "bf16", "FP16": "fp16"}  # OPTIMIZATION_CAPABILITIES -> run precision
CPU_FLAGS_FOR = {"BF16": NATIVE_BF16_FLAGS, "FP16": NATIVE_FP16_FLAGS}
"""The CPU flags behind a capability, for capped runs (``capabilities``)."""


def _openvino():
    try:
        import openvino
    except ImportError:
        raise UnavailableError("backend 'openvino' needs openvino: pip install openvino") from None
    return openvino


def _present(device: str, available: list[str]) -> bool:
    """``GPU`` matches any ``GPU.N``; an indexed name must match exactly."""
    return any(name == device or ("." not in device and name.partition(".")[0] == device) for name in available)


def compile_cache(ir: IrModel, precision: str) -> Path:
    """OpenVINO's compiled-blob cache for one IR at one precision. OpenVINO 2025's CPU plugin files a blob under the
    same key whatever the inference precision: a bf16 compile after an f32 one of the same IR loaded the f32 blob
    and returned NaN (full-size SmolVLA's prefill) or crashed the process (a segfault on smolvla-tiny), the abort
    issue 19 saw. One folder per IR and precision keeps every blob with the graph and precision it was compiled
    for."""
    return cache_root() / "openvino" / ir.folder.name / precision


def _numpy(value: Tensor) -> np.ndarray:
    """Host array for a graph input; the graphs are fp32, so reduced-precision floats are widened."""
    value = value.detach()
    return (value.float() if value.is_floating_point() else value).contiguous().numpy()


class OpenVinoPolicy(GraphPolicy):
    def __init__(
        self,
        compiled: dict[str, Any],
        dtype: torch.dtype,
        details: dict[str, Any],
        graphs: dict[str, tuple[list[str], list[str]]],
        cache_type: type,
        profile_nodes: bool = False,
    ) -> None:
        super().__init__(details, graphs, cache_type)
        self.profile_nodes = profile_nodes
        self._nodes: list[NodeEvent] = []
        self.requests = {graph: model.create_infer_request() for graph, model in compiled.items()}
        self.execution_devices = sorted(
            {str(name) for model in compiled.values() for name in model.get_property("EXECUTION_DEVICES")}
        )
        # a compiled port may carry several names (``t`` and ``/Cast_output_0``): feed by any of them
        self.inputs = {
            graph: {name for port in model.inputs for name in port.get_names()} for graph, model in compiled.items()
        }
        self.dtype = dtype
        self.recorded: Calibration | None = None  # set to a dict to keep every call's feeds (calibration)

    def run_graph(self, graph: str, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        """Inputs are shared zero-copy; outputs are copied out of the request's reused buffers."""
        present = {name: _numpy(value) for name, value in feeds.items() if name in self.inputs[graph]}
        if self.recorded is not None:
            self.recorded.setdefault(graph, []).append({name: array.copy() for name, array in present.items()})
        started = perf_counter_ns()
        results = self.requests[graph].infer(present, share_inputs=True, share_outputs=False)
        if self.profile_nodes:
            self._record_nodes(graph, started)
        outputs = [torch.from_numpy(array) for array in results.to_tuple()]
        cast = [out.to(self.dtype) if out.is_floating_point() else out for out in outputs]
        return dict(zip(self.graphs[graph][1], cast, strict=True))

    def synchronize(self) -> None:
        """``InferRequest.infer`` is synchronous, so every call has already finished."""

    def _record_nodes(self, graph: str, started_ns: int) -> None:
        """PERF_COUNT gives each executed node's duration but no start time: nodes are laid end to end in
        execution order from the call's start (the placement is approximate, the durations are measured)."""
        cursor = started_ns
        for info in self.requests[graph].profiling_info:
            duration = round(info.real_time.total_seconds() * 1e9)
            if duration <= 0:
                continue
            self._nodes.append(
                NodeEvent(
                    graph=graph,
                    name=info.node_name,
                    op_type=info.node_type,
                    start_ns=cursor,
                    end_ns=cursor + duration,
                    args={"exec_type": info.exec_type, "cpu_time_us": info.cpu_time.total_seconds() * 1e6},
                )
            )
            cursor += duration

    def executed_on(self) -> ExecutionTarget:
        """The devices OpenVINO reports executing the compiled graphs (AUTO resolves to one of them)."""
        engines = {openvino_engine(name) or "unknown" for name in self.execution_devices}
        engine = engines.pop() if len(engines) == 1 else "mixed"
        devices = ", ".join(self.execution_devices)
        return ExecutionTarget(engine=engine, device=devices, source="openvino EXECUTION_DEVICES")

    def node_events(self) -> list[NodeEvent]:
        return list(self._nodes)


class OpenVinoOptions(NoOptions):
    device_target: str | None = None  # CPU, GPU, NPU, AUTO:...; None: the engine's default
    profile_nodes: bool = False
    quant_scheme: str | None = None  # int8: one of SCHEMES["int8"]; None: the first


class OpenVinoBackend(Backend):
    profiles_nodes = True
    exports_graphs = True
    runtime_bytes = 256 * 2**20
    name = "openvino"
    runtime_library = "openvino"
    Options = OpenVinoOptions
    engines: ClassVar[dict[str, str]] = {
        "cpu": "with device target CPU",
        "intel-gpu": "with device target GPU",
        "intel-npu": "with device target NPU",
    }
    default_target: ClassVar[dict[str, str]] = {"cpu": "CPU", "intel-gpu": "GPU", "intel-npu": "NPU"}
    int8_schemes: ClassVar[tuple[str, ...]] = SCHEMES["int8"]

    @classmethod
    def route(cls, engine: str, options: BackendOptions) -> tuple[torch.device, BackendOptions]:
        """The device target decides the engine (AUTO is checked on what it picked); tensors stay on the host."""
        target = options.device_target or cls.default_target[engine]
        reached = openvino_engine(target)
        if reached is not None and reached != engine:
            raise UnavailableError(
                f"--device-target {target} executes on {reached}, not on {engine}; use --device-target "
                f"{cls.default_target[engine]}"
            )
        return torch.device("cpu"), replace(options, device_target=target)

    @classmethod
    def from_options(cls, options: BackendOptions) -> OpenVinoBackend:
        own = cls.own_options(options)
        return cls(own.device_target or "CPU", own.profile_nodes, own.quant_scheme or cls.int8_schemes[0])

    def __init__(self, target: str = "CPU", profile_nodes: bool = False, int8_scheme: str = "ptq") -> None:
        self.target = target.upper()
        self.profile_nodes = profile_nodes
        self.schemes = {**DEFAULT_SCHEME, "int8": check_scheme("int8", int8_scheme)}

    @cached_property
    def core(self) -> Any:
        return _openvino().Core()

    def hardware(self) -> list[str]:
        """The devices the target may run on: itself, or AUTO's candidates (every available device when unlisted)."""
        kind, _, listed = self.target.partition(":")
        if kind != "AUTO":
            return [self.target]
        return [name for name in listed.split(",") if name] or self.core.available_devices

    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type != "cpu":
            return (
                f"the openvino backend takes and returns host tensors: run it on the cpu torch device, not {device}, "
                f"and choose the OpenVINO device with the device target (now '{self.target}')"
            )
        try:
            available = self.core.available_devices
        except UnavailableError as error:
            return str(error)
        hardware = self.hardware()
        if not hardware or not all(_present(name, available) for name in hardware):
            return (
                f"OpenVINO device '{self.target}' is not available here; "
                f"available OpenVINO devices: {', '.join(available) or 'none'} (or AUTO over them)"
            )
        return None

    def precisions(self, device: torch.device) -> tuple[str, ...]:
        """The float precisions every device of the target computes natively (others it would silently run in
        f32), and int8/int4 through NNCF on CPU targets where NNCF is installed."""
        if self.unavailable_reason(device):
            return tuple(Precision.DTYPES)
        native = [self.capabilities(name) for name in self.hardware()]
        floats = tuple(p for cap, p in CAPABILITIES.items() if all(cap in caps for caps in native))
        on_cpu = all(openvino_engine(name) == "cpu" for name in self.hardware())
        return floats + (tuple(SCHEMES) if on_cpu and nncf_missing() is None else ())

    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> PreparedPolicy:
        ov = _openvino()
        reason = self.unavailable_reason(device)
        if reason:
            raise UnavailableError(reason)
        if precision not in self.precisions(device):
            missing = nncf_missing() if Precision.is_quantized(precision) else None
            raise UnavailableError(
                missing
                or f"OpenVINO device '{self.target}' has no native {precision} (it would silently run f32); "
                f"precisions here: {', '.join(self.precisions(device))}"
            )
        exported = timed_export(spec, workload, "fp32", seed)
        with stage("convert") as timed:
            source = float_ir(exported)
            timed.cached = source.reused
        ir, quantization = source, {}
        if Precision.is_quantized(precision):
            scheme = self.schemes[precision]

            def calibrate(first: int, count: int) -> Calibration:
                return self._calibration(source, exported, spec, workload, first, count)

            with stage("quantize") as timed:
                ir = quantized_ir(source, workload.model_dump(), precision, scheme, seed, calibrate)
                timed.cached = ir.reused
            quantization = {
                "quantization": describe(precision, scheme, ir.meta),
                "quantization_scheme": scheme,
                "nncf": ir.meta["nncf"],
                "quantized_ir_reused": ir.reused,
            }
        config = self._config(precision, ir)
        models = {graph: self.core.read_model(str(ir.xml(graph))) for graph in exported.graphs}
        requested = self.inference_type(precision)
        if requested != "f32" and not all(marks_honoured(models[graph], ir.marked.get(graph, [])) for graph in models):
            raise UnavailableError(
                f"OpenVINO {ov.__version__} does not read the IR's keep-f32 marks (DisablePrecisionConversion): "
                f"its {precision} would round the time embedding and RoPE angles and fail the correctness gate; "
                "use fp32 or OpenVINO >= 2025"
            )
        with stage("compile"):
            compiled = {graph: self.core.compile_model(model, self.target, config) for graph, model in models.items()}
        effective = sorted({name for model in compiled.values() if (name := self._precision(model))})
        if effective and effective != [requested]:
            raise UnavailableError(
                f"OpenVINO device '{self.target}' was asked for {requested} but runs {', '.join(effective)}"
            )
        details = self._details(compiled["prefill"], requested, effective, exported.folder, exported.reused, ir)
        cache_type = load_cache_class(exported.cache_class)
        return OpenVinoPolicy(
            compiled,
            Precision.dtype(precision),
            {**details, "cache_dir": config["CACHE_DIR"], **quantization},
            exported.graphs,
            cache_type,
            self.profile_nodes,
        )

    def inference_type(self, precision: str) -> str:
        """OpenVINO's inference precision for a run precision. Between the quantized ops of an int8 graph: bf16
        where every device of the target computes it natively (OpenVINO's own default on such CPUs), else f32; the
        keep-f32 marks hold either way. int4 stays f32: OpenVINO 2025's CPU plugin fails to compile NNCF's int4
        groups at bf16 (TransposeToReshape on pi0-tiny's action_in_proj)."""
        if precision in ELEMENT_TYPES:
            return ELEMENT_TYPES[precision]
        if precision == "int4":
            return "f32"
        native = all("BF16" in self.capabilities(name) for name in self.hardware())
        return "bf16" if native else "f32"

    def capabilities(self, name: str) -> set[str]:
        """An OpenVINO device's OPTIMIZATION_CAPABILITIES; on a CPU under ``VLABENCH_MAX_CPU_ISA``, less the float
        precisions the capped flags lack (the plugin reads the CPU itself, while its oneDNN kernels obey the cap:
        an int8 graph compiled at bf16 there found no Softmax kernel)."""
        found = set(self.core.get_property(name, "OPTIMIZATION_CAPABILITIES"))
        if active_cap() and openvino_engine(name) == "cpu":
            flags = read_cpu_flags()
            found -= {cap for cap, needs in CPU_FLAGS_FOR.items() if not needs & flags}
        return found

    def _config(self, precision: str, ir: IrModel) -> dict[str, Any]:
        """Compile settings; compiled blobs are cached per IR and inference precision (``compile_cache``)."""
        ov = _openvino()
        element = self.inference_type(precision)
        config: dict[str, Any] = {
            "INFERENCE_PRECISION_HINT": getattr(ov.Type, element),
            "PERFORMANCE_HINT": ov.properties.hint.PerformanceMode.LATENCY,
            "CACHE_DIR": str(compile_cache(ir, f"{precision}-{element}")),
            "PERF_COUNT": self.profile_nodes,
        }
        supported = [self.core.get_property(name, "SUPPORTED_PROPERTIES") for name in self.hardware()]
        if all("INFERENCE_NUM_THREADS" in properties for properties in supported):  # a CPU-plugin setting
            config["INFERENCE_NUM_THREADS"] = torch.get_num_threads()
        if precision == "int4" and active_cap() and not read_cpu_flags() & INT8_DOT_FLAGS:
            # Under an ISA cap without VNNI the plugin still enables int8 dynamic quantization from its own reading
            # of the CPU, for which its capped oneDNN then has no inner-product kernel: the compile fails.
            config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 0
        return config

    def _details(
        self, model: Any, requested: str, effective: list[str], onnx: Any, onnx_reused: bool, ir: IrModel
    ) -> dict[str, Any]:
        hint = self._property(model, "PERFORMANCE_HINT")  # a str, or a PerformanceMode from AUTO
        return {
            "openvino": _openvino().__version__,
            "device_target": self.target,
            "execution_devices": self._property(model, "EXECUTION_DEVICES"),
            "full_device_name": ", ".join(self.core.get_property(name, "FULL_DEVICE_NAME") for name in self.hardware()),
            "requested_inference_precision": requested,
            "effective_inference_precision": effective[0] if effective else None,
            "performance_hint": getattr(hint, "name", hint),
            "inference_num_threads": self._property(model, "INFERENCE_NUM_THREADS"),
            "dynamic_quantization_group_size": self._property(model, "DYNAMIC_QUANTIZATION_GROUP_SIZE"),
            "kept_f32_ops": sum(len(names) for names in ir.marked.values()),
            "onnx_folder": str(onnx),
            "onnx_reused": onnx_reused,
            "ir_folder": str(ir.folder),
            "ir_reused": ir.reused,
        }

    def _calibration(
        self, source: IrModel, exported: Any, spec: ModelSpec, workload: Workload, first: int, count: int
    ) -> Calibration:
        """Every graph call's inputs while the f32 IR samples chunks for ``count`` seeded observations and noise."""
        cpu = torch.device("cpu")
        config = {**self._config("fp32", source), "PERF_COUNT": False}
        compiled = {graph: self.core.compile_model(str(source.xml(graph)), "CPU", config) for graph in exported.graphs}
        policy = OpenVinoPolicy(compiled, torch.float32, {}, exported.graphs, load_cache_class(exported.cache_class))
        policy.recorded = {}
        loop = make_action_loop(spec, workload, cpu)
        for seed in range(first, first + count):
            obs = synthetic_observation(spec, workload, seed, torch.float32, cpu)
            loop.sample(policy, policy.prefix(obs), initial_noise(workload, seed, torch.float32, cpu))
        return policy.recorded

    @staticmethod
    def _property(model: Any, key: str) -> Any:
        """A compiled-model property, or None where the device does not report it (AUTO hides the precision)."""
        try:
            return model.get_property(key)
        except RuntimeError:
            return None

    @classmethod
    def _precision(cls, model: Any) -> str | None:
        """The inference precision a compiled model actually runs (``f32``, ``bf16``, ``f16``), where reported."""
        value = cls._property(model, "INFERENCE_PRECISION_HINT")
        return value.get_type_name() if value is not None else None
