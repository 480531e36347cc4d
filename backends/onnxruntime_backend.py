"""ONNX Runtime over the exported graphs, with the execution provider chosen by ``--ep``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from vlabench.backends.base import Backend, BackendOptions, PreparedPolicy
from vlabench.backends.onnx_export import ExportedModel, export_onnx
from vlabench.errors import InputError, UnavailableError
from vlabench.replicas import Observation, PrefixCache
from vlabench.specs import ModelSpec
from vlabench.workload import Workload

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
EXPORT_PRECISION = {"fp32": "fp32", "fp16": "fp16"}


def _ort():
    try:
        import onnxruntime
    except ImportError:
        raise UnavailableError("backend 'onnxruntime' needs onnxruntime: pip install onnxruntime") from None
    return onnxruntime


class OrtPolicy(PreparedPolicy):
    def __init__(self, sessions: dict[str, Any], exported: ExportedModel, details: dict[str, Any]) -> None:
        self.sessions = sessions
        self.exported = exported
        self._details = details
        self.inputs = {name: {i.name for i in session.get_inputs()} for name, session in sessions.items()}

    def _run(self, graph: str, feeds: dict[str, Tensor]) -> list[Tensor]:
        """Host arrays in and out; outputs return to the device the inputs came from."""
        present = {name: value.detach().cpu().numpy() for name, value in feeds.items() if name in self.inputs[graph]}
        device = next(iter(feeds.values())).device
        return [torch.from_numpy(np.asarray(out)).to(device) for out in self.sessions[graph].run(None, present)]

    def embed_images(self, obs: Observation) -> Tensor:
        return self._run("vision", {"images": obs.images})[0]

    def prefill(self, obs: Observation, image_tokens: Tensor) -> PrefixCache:
        feeds = {
            "image_tokens": image_tokens,
            "language_tokens": obs.language_tokens,
            "language_mask": obs.language_mask,
            "state": obs.state,
        }
        keys, values, valid = self._run("prefill", feeds)
        return PrefixCache(keys=keys, values=values, valid=valid, state=obs.state)

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        feeds = {"x_t": x_t, "t": t, "keys": cache.keys, "values": cache.values, "valid": cache.valid}
        return self._run("denoise", {**feeds, "state": cache.state})[0]

    def synchronize(self) -> None:
        """``InferenceSession.run`` returns host arrays, so every call has already finished."""

    def details(self) -> dict[str, Any]:
        return self._details


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"

    @classmethod
    def from_options(cls, options: BackendOptions) -> OnnxRuntimeBackend:
        return cls(options.ep)

    def __init__(self, ep: str | None = None) -> None:
        if ep is not None and ep not in EXECUTION_PROVIDERS:
            raise InputError(f"Unknown execution provider '{ep}'. Valid --ep values: {', '.join(EXECUTION_PROVIDERS)}.")
        self.ep = ep

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
        return ("fp32", "fp16") if self.provider_for(device) in GPU_PROVIDERS else ("fp32",)

    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> PreparedPolicy:
        ort = _ort()
        exported = export_onnx(spec, workload, EXPORT_PRECISION[precision], seed)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        provider = EXECUTION_PROVIDERS[self.provider_for(device)]
        providers = [provider] if provider == "CPUExecutionProvider" else [provider, "CPUExecutionProvider"]
        sessions = {
            graph: ort.InferenceSession(str(exported.graph(graph)), options, providers=providers)
            for graph in ("vision", "prefill", "denoise")
        }
        details = {
            "onnxruntime": ort.__version__,
            "execution_provider": provider,
            "providers_in_use": sessions["denoise"].get_providers(),
            "graph_optimization_level": "ORT_ENABLE_ALL",
            "intra_op_threads": options.intra_op_num_threads,
            "inter_op_threads": options.inter_op_num_threads,
            "onnx_folder": str(exported.folder),
            "onnx_reused": exported.reused,
        }
        return OrtPolicy(sessions, exported, details)
