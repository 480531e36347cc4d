"""Execution targets: which compute engine a device profile stands for, and where a run actually executed.

A result is about a *profile* (price, TDP, datasheet) but executes on an *engine* that a runtime reaches: the CPU,
an NVIDIA GPU through CUDA, an Intel GPU or NPU through OpenVINO (or torch's XPU device), an Ascend NPU through
torch_npu or ONNX Runtime's CANN provider. A run whose runtime reports another engine than its profile's is
refused, so no result can claim a device it did not execute on.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vlabench.hardware.detection import HostInfo
from vlabench.hardware.devices import DeviceProfile, ResolvedDevice, resolve_device

Engine = Literal["cpu", "cuda", "intel-gpu", "intel-npu", "ascend-npu"]

ENGINE_OF_TORCH_TYPE: dict[str, Engine] = {
    "cpu": "cpu",
    "cuda": "cuda",
    "xpu": "intel-gpu",
    "npu": "ascend-npu",
    "privateuseone": "ascend-npu",  # torch_npu registers "npu" as torch's PrivateUse1 device
}
ENGINE_OF_OPENVINO_DEVICE: dict[str, Engine] = {"CPU": "cpu", "GPU": "intel-gpu", "NPU": "intel-npu"}
ENGINE_OF_ORT_PROVIDER: dict[str, Engine] = {
    "CPUExecutionProvider": "cpu",
    "CUDAExecutionProvider": "cuda",
    "TensorrtExecutionProvider": "cuda",
    "CANNExecutionProvider": "ascend-npu",
}
ENGINE_LABELS: dict[str, str] = {
    "cpu": "the host CPU",
    "cuda": "an NVIDIA GPU (CUDA)",
    "intel-gpu": "an Intel GPU",
    "intel-npu": "an Intel NPU",
    "ascend-npu": "an Ascend NPU",
}


class ExecutionTarget(BaseModel):
    """Where a run executed, read back from the runtime after preparation (never assumed from the profile)."""

    model_config = ConfigDict(extra="forbid")

    engine: str = Field(description="an Engine; what a runtime reports beyond them (mixed, unknown) never matches")
    device: str = Field(description="the runtime's own name: a torch device, ORT providers, OpenVINO devices")
    source: str = Field(description="how it was read back")


def openvino_engine(device_name: str) -> Engine | None:
    """``GPU.1`` → intel-gpu; ``AUTO``/``HETERO`` and unknown names → None."""
    return ENGINE_OF_OPENVINO_DEVICE.get(device_name.split(".")[0].split(":")[0].upper())


def profile_engine(profile: DeviceProfile, device_target: str | None = None) -> Engine:
    """The engine a run labelled with ``profile`` must execute on.

    A multi-engine profile (e.g. a Core Ultra with CPU, iGPU and NPU) is about the engine the OpenVINO device
    target names; every other profile is about its own torch device type.
    """
    if device_target and profile.engines:
        wanted = openvino_engine(device_target)
        offered = {openvino_engine(e.openvino_device) for e in profile.engines.values() if e.openvino_device}
        if wanted in offered:
            return wanted  # type: ignore[return-value]
    return ENGINE_OF_TORCH_TYPE[profile.torch_device]


def resolve_target(
    requested: str, engines: Collection[str], device_target: str | None = None, host: HostInfo | None = None
) -> ResolvedDevice:
    """``--device`` resolved (``resolve_device``) for a backend that reaches ``engines`` here: ``auto`` picks the first
    present profile standing for one of them (``profile_engine`` under ``device_target``)."""
    return resolve_device(requested, host, lambda profile: profile_engine(profile, device_target) in engines)


def mismatch(expected: str, executed: ExecutionTarget) -> str | None:
    """Why a result is mislabelled, or None when it executed on the engine its profile stands for."""
    if executed.engine == expected:
        return None
    return (
        f"executed on {ENGINE_LABELS.get(executed.engine, executed.engine)} ({executed.device}, {executed.source}), "
        f"not on {ENGINE_LABELS.get(expected, expected)} as its device profile says"
    )
