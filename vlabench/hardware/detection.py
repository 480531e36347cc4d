"""What hardware this host has: CPU, CUDA GPUs (NVML), Jetson module, Intel GPU/NPU (OpenVINO), Ascend NPUs."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import psutil
import torch

from vlabench.hardware.isa_cap import capped


@dataclass(frozen=True)
class HostInfo:
    arch: str
    cpu_model: str
    logical_cores: int
    physical_cores: int
    memory_gb: float
    cuda_devices: tuple[str, ...]
    jetson_model: str | None
    torch_cuda: bool = False  # torch itself can use CUDA (NVML may see GPUs a CPU-only torch cannot use)
    l4t_release: str | None = None
    openvino_devices: tuple[str, ...] = ()
    ascend_chips: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [f"{self.cpu_model} ({self.physical_cores} cores, {self.memory_gb:.0f} GB RAM)"]
        parts += [f"CUDA GPU '{name}'" for name in self.cuda_devices]
        if self.jetson_model:
            release = f", L4T {self.l4t_release}" if self.l4t_release else ""
            parts.append(f"Jetson '{self.jetson_model}'{release}")
        parts += [f"OpenVINO device '{name}'" for name in self.openvino_devices if name != self.cpu_model]
        parts += [f"Ascend NPU '{chip}'" for chip in self.ascend_chips]
        return ", ".join(parts)


def read_cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name from /proc/cpuinfo (x86 'model name', Arm 'Model'/'Hardware'), else platform."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Model", "Hardware"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, flags=re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or platform.machine()


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """ISA feature flags of the first CPU (x86 'flags', Arm 'Features'), less those above the process's
    ``VLABENCH_MAX_CPU_ISA`` cap (``isa_cap.py``)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return set()
    match = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, flags=re.MULTILINE)
    return capped(set(match.group(1).split())) if match else set()


NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
NATIVE_FP16_FLAGS = frozenset({"avx512_fp16", "amx_fp16"})
INT8_DOT_FLAGS = frozenset({"amx_int8", "avx512_vnni", "avx_vnni"})
"""An int8 dot product accumulating in int32; without one, x86 int8 kernels use AVX2's saturating VPMADDUBSW."""


def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX); elsewhere bf16 math is emulated."""
    return bool(NATIVE_BF16_FLAGS & read_cpu_flags(cpuinfo))


def read_jetson_model(device_tree_model: Path = Path("/proc/device-tree/model")) -> str | None:
    try:
        model = device_tree_model.read_text(errors="replace").strip("\x00\n ")
    except OSError:
        return None
    return model if "jetson" in model.lower() else None


def read_l4t_release(release_file: Path = Path("/etc/nv_tegra_release")) -> str | None:
    """'# R36 (release), REVISION: 4.3, ...' -> '36.4.3'."""
    try:
        text = release_file.read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def nvml_gpu_names() -> tuple[str, ...] | None:
    """GPU names from NVML, or None when NVML (nvidia-ml-py and a driver) is not available."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        names = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return tuple(names)
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def cuda_gpu_names() -> tuple[str, ...]:
    names = nvml_gpu_names()
    if names:
        return names
    return tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))


def openvino_device_names() -> tuple[str, ...]:
    """FULL_DEVICE_NAME of every device OpenVINO can use here (CPU, GPU.N, NPU); empty without OpenVINO."""
    try:
        import openvino
    except ImportError:
        return ()
    core = openvino.Core()
    return tuple(str(core.get_property(device, "FULL_DEVICE_NAME")) for device in core.available_devices)


def parse_npu_smi_chips(output: str) -> tuple[str, ...]:
    """Chip names ('310P3', '310B4', '910B4') from `npu-smi info` output."""
    return tuple(dict.fromkeys(re.findall(r"\b((?:310|910)[A-Z]?\d?)\b", output)))


def ascend_chip_names() -> tuple[str, ...]:
    if not shutil.which("npu-smi"):
        return ()
    try:
        completed = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse_npu_smi_chips(completed.stdout)


@cache
def detect_host() -> HostInfo:
    return HostInfo(
        arch=platform.machine(),
        cpu_model=read_cpu_model(),
        logical_cores=psutil.cpu_count(logical=True) or 1,
        physical_cores=psutil.cpu_count(logical=False) or psutil.cpu_count(logical=True) or 1,
        memory_gb=psutil.virtual_memory().total / 1e9,
        cuda_devices=cuda_gpu_names(),
        torch_cuda=torch.cuda.is_available(),
        jetson_model=read_jetson_model(),
        l4t_release=read_l4t_release(),
        openvino_devices=openvino_device_names(),
        ascend_chips=ascend_chip_names(),
    )
