"""Eager PyTorch on CPU or CUDA: the reference backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from vlabench.backends.base import Backend, BackendOptions, NoOptions, PreparedPolicy
from vlabench.backends.torch.quantize import INT8_SCHEMES, build_torch_replica, quantized_precisions
from vlabench.errors import UnavailableError
from vlabench.hardware.targets import ENGINE_OF_TORCH_TYPE, ExecutionTarget
from vlabench.kernels.expert_fusion import ExpertKVHoister
from vlabench.models.replicas import Observation, PrefixCache
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision


class TorchPolicy(PreparedPolicy):
    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        hoister: ExpertKVHoister | None = None,
        quantization: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.device = device
        self.hoister = hoister
        self.quantization = quantization or {}

    @torch.inference_mode()
    def embed_images(self, obs: Observation) -> Tensor:
        return self.model.embed_images(obs.images)

    @torch.inference_mode()
    def prefill(self, obs: Observation, image_tokens: Tensor) -> PrefixCache:
        """With expert-K/V fusion the cache leaves the prefix phase with the expert's prefix work already done."""
        cache = self.model.prefill(obs, image_tokens)
        return self.hoister(cache) if self.hoister is not None else cache

    @torch.inference_mode()
    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        return self.model.denoise_step(x_t, t, cache)

    @torch.inference_mode()
    def decode_step(self, token: Tensor, cache: Any) -> tuple[Tensor, Tensor, Tensor]:
        return self.model.decode_step(token, cache)

    def prefix_lane(self) -> Callable[[Observation], PrefixCache]:
        if self.hoister is None:
            return self.prefix
        hoister = ExpertKVHoister(self.model, self.hoister.suffix_tokens)
        lane = TorchPolicy(self.model, self.device, hoister, self.quantization)
        return lane.prefix

    def executed_on(self) -> ExecutionTarget:
        return parameters_target(self.model)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def details(self) -> dict[str, Any]:
        return {
            "mode": "eager",
            "torch": torch.__version__,
            "intra_op_threads": torch.get_num_threads(),
            "sdpa": "torch.nn.functional.scaled_dot_product_attention",
            "fuse_expert_kv": self.hoister is not None,
            **self.quantization,
        }


class TorchOptions(NoOptions):
    fuse_expert_kv: bool = False
    quant_scheme: str | None = None  # CPU int8: one of INT8_SCHEMES; None: the first that runs here


class TorchBackend(Backend):
    is_reference = True
    fuses_expert_kv = True
    int8_schemes: ClassVar[tuple[str, ...]] = INT8_SCHEMES
    name = "torch"
    runtime_library = "torch"
    Options = TorchOptions
    engines: ClassVar[dict[str, str]] = {
        "cpu": "on the host CPU",
        "cuda": "on CUDA",
        "intel-gpu": "on torch's XPU device (a torch build with XPU)",
        "ascend-npu": "on torch_npu's NPU device (pip install torch-npu)",
    }

    @classmethod
    def route(cls, engine: str, options: BackendOptions) -> tuple[torch.device, BackendOptions]:
        return torch_device_for(engine), options

    @classmethod
    def from_options(cls, options: BackendOptions) -> TorchBackend:
        own = cls.own_options(options)
        return cls(own.fuse_expert_kv, own.quant_scheme)

    def __init__(self, fuse_expert_kv: bool = False, quant_scheme: str | None = None) -> None:
        self.fuse_expert_kv = fuse_expert_kv
        self.quant_scheme = quant_scheme  # CPU int8: INT8_SCHEMES; None: the first that runs here

    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type == "cuda" and not torch.cuda.is_available():
            return f"torch {torch.__version__} has no usable CUDA device (CUDA build: {torch.version.cuda or 'no'})"
        return None

    def precisions(self, device: torch.device) -> tuple[str, ...]:
        """The float precisions, and int8/fp8/int4 where torchao (or vlabench's int8 kernel) and the device run them."""
        return (*Precision.DTYPES, *quantized_precisions(device))

    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> PreparedPolicy:
        model, quantization = build_torch_replica(spec, seed, precision, device, self.quant_scheme)
        hoister = ExpertKVHoister(model, workload.suffix_tokens) if self.fuse_expert_kv else None
        return TorchPolicy(model, device, hoister, quantization)


def torch_device_for(engine: str) -> torch.device:
    """The torch device of ``engine`` in this torch build; UnavailableError when the build cannot reach it."""
    if engine == "cpu":
        return torch.device("cpu")
    if engine == "cuda":
        return torch.device("cuda:0")
    if engine == "intel-gpu":
        if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
            raise UnavailableError(f"torch {torch.__version__} has no usable XPU device (an Intel GPU build of torch)")
        return torch.device("xpu:0")
    if engine == "ascend-npu":
        try:
            import torch_npu  # noqa: F401  (registers torch's "npu" device)
        except ImportError:
            raise UnavailableError(
                "the torch backend reaches Ascend NPUs through torch_npu (install torch-npu)"
            ) from None
        return torch.device("npu:0")
    raise UnavailableError(f"the torch backend does not execute on {engine}")


def parameters_target(model: nn.Module) -> ExecutionTarget:
    """The engine the model's weights live on (torch runs each operator where its inputs are)."""
    device = next(model.parameters()).device
    return ExecutionTarget(
        engine=ENGINE_OF_TORCH_TYPE.get(device.type, device.type), device=str(device), source="torch parameter device"
    )
