"""Device profiles (``profiles/devices/*.yaml``), host detection and ``--device`` resolution."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import psutil
import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vlabench.errors import InputError, UnavailableError, unknown_name

FAMILY_ALIASES = ("auto", "host", "cpu", "cuda", "gpu", "jetson")


class Figure(BaseModel):
    """A datasheet number with where it came from; ``estimate`` marks values that are not vendor-stated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    source: str
    estimate: bool = False


class Detection(BaseModel):
    """Rules that identify the hardware on the machine that runs (regexes, case-insensitive)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_model: str | None = None
    cuda_name: str | None = None
    jetson_model: str | None = None
    arch: str | None = None


class DeviceProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    display_name: str
    kind: Literal["cpu", "gpu", "soc", "npu", "xpu"]
    vendor: str
    torch_device: Literal["cpu", "cuda"]
    detect: Detection
    memory_gb: Figure | None = None
    bandwidth_gbs: Figure | None = None
    peak_tflops: dict[Literal["fp32", "fp16", "bf16", "int8"], Figure] = Field(default_factory=dict)
    tdp_w: Figure | None = None
    notes: str = ""


@dataclass(frozen=True)
class HostInfo:
    arch: str
    cpu_model: str
    logical_cores: int
    physical_cores: int
    memory_gb: float
    cuda_devices: tuple[str, ...]
    jetson_model: str | None

    def describe(self) -> str:
        parts = [f"{self.cpu_model} ({self.physical_cores} cores, {self.memory_gb:.0f} GB RAM)"]
        parts += [f"CUDA GPU '{name}'" for name in self.cuda_devices]
        if self.jetson_model:
            parts.append(f"Jetson '{self.jetson_model}'")
        return ", ".join(parts)


@dataclass(frozen=True)
class ResolvedDevice:
    """The profile a run uses and the torch device it runs on."""

    profile: DeviceProfile
    torch_device: torch.device
    requested: str
    note: str


def profile_names() -> list[str]:
    folder = resources.files("vlabench.profiles").joinpath("devices")
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


@cache
def load_device_profile(name: str) -> DeviceProfile:
    names = profile_names()
    if name not in names:
        raise unknown_name("device", name, [*names, *FAMILY_ALIASES])
    text = resources.files("vlabench.profiles").joinpath("devices", f"{name}.yaml").read_text()
    origin = f"profiles/devices/{name}.yaml"
    try:
        return DeviceProfile.model_validate(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise InputError(f"{origin}: malformed YAML: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InputError(f"{origin}: invalid device profile: {problems}") from None


def all_profiles() -> list[DeviceProfile]:
    return [load_device_profile(name) for name in profile_names()]


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


def read_jetson_model(device_tree_model: Path = Path("/proc/device-tree/model")) -> str | None:
    try:
        model = device_tree_model.read_text(errors="replace").strip("\x00\n ")
    except OSError:
        return None
    return model if "jetson" in model.lower() else None


@cache
def detect_host() -> HostInfo:
    cuda = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return HostInfo(
        arch=platform.machine(),
        cpu_model=read_cpu_model(),
        logical_cores=psutil.cpu_count(logical=True) or 1,
        physical_cores=psutil.cpu_count(logical=False) or psutil.cpu_count(logical=True) or 1,
        memory_gb=psutil.virtual_memory().total / 1e9,
        cuda_devices=cuda,
        jetson_model=read_jetson_model(),
    )


def _matches(pattern: str | None, value: str | None) -> bool:
    return bool(pattern and value and re.search(pattern, value, flags=re.IGNORECASE))


def profile_present(profile: DeviceProfile, host: HostInfo) -> bool:
    """Whether the hardware a profile describes is on this host."""
    rules = profile.detect
    if rules.jetson_model:
        return _matches(rules.jetson_model, host.jetson_model)
    if rules.cuda_name:
        return any(_matches(rules.cuda_name, name) for name in host.cuda_devices)
    if rules.cpu_model:
        return _matches(rules.cpu_model, host.cpu_model)
    return _matches(rules.arch, host.arch)


def detected_profiles(host: HostInfo) -> list[DeviceProfile]:
    """Profiles present on this host, most specific first (Jetson, GPU, named CPU, generic CPU)."""

    def specificity(profile: DeviceProfile) -> int:
        rules = profile.detect
        return 0 if rules.jetson_model else 1 if rules.cuda_name else 2 if rules.cpu_model else 3

    return sorted((p for p in all_profiles() if profile_present(p, host)), key=specificity)


def _fallback_cpu_profile(host: HostInfo) -> DeviceProfile:
    """A profile synthesized from detection for a CPU no profile describes."""
    return DeviceProfile(
        name=f"generic-{host.arch}-cpu",
        display_name=f"{host.cpu_model} (generic)",
        kind="cpu",
        vendor="unknown",
        torch_device="cpu",
        detect=Detection(arch=re.escape(host.arch)),
        memory_gb=Figure(value=round(host.memory_gb, 1), source="detected on this host (psutil)"),
        notes="built from detection; no datasheet figures",
    )


def resolve_device(requested: str, host: HostInfo | None = None) -> ResolvedDevice:
    """Turn ``--device`` (a profile name or a family alias) into a profile present on this host."""
    host = host or detect_host()
    present = detected_profiles(host)
    if requested in ("auto", "host"):
        choice = present[0] if present else _fallback_cpu_profile(host)
        return _resolved(choice, requested, host)
    if requested == "cpu":
        cpus = [p for p in present if p.kind == "cpu"] or [_fallback_cpu_profile(host)]
        return _resolved(cpus[0], requested, host)
    if requested in ("cuda", "gpu"):
        gpus = [p for p in present if p.torch_device == "cuda"]
        if not host.cuda_devices:
            raise UnavailableError(
                f"--device {requested}: no CUDA device on this host (torch {torch.__version__}, "
                f"CUDA build: {torch.version.cuda or 'no'}). Detected: {host.describe()}. Use --device cpu or auto."
            )
        return _resolved(gpus[0] if gpus else _fallback_cuda_profile(host), requested, host)
    if requested == "jetson":
        jetsons = [p for p in present if p.detect.jetson_model]
        if not jetsons:
            raise UnavailableError(
                f"--device jetson: this host is not a Jetson (detected: {host.describe()}). Run vlabench on the "
                "Jetson itself, or pick a profile present here with --device auto."
            )
        return _resolved(jetsons[0], requested, host)
    profile = load_device_profile(requested)
    if profile not in present:
        raise UnavailableError(
            f"--device {requested}: {profile.display_name} is not present on this host (detected: "
            f"{host.describe()}). Run on that hardware, or use --device auto."
        )
    return _resolved(profile, requested, host)


def _fallback_cuda_profile(host: HostInfo) -> DeviceProfile:
    return DeviceProfile(
        name="generic-cuda-gpu",
        display_name=f"{host.cuda_devices[0]} (generic)",
        kind="gpu",
        vendor="NVIDIA",
        torch_device="cuda",
        detect=Detection(cuda_name=re.escape(host.cuda_devices[0])),
        notes="built from detection; no datasheet figures",
    )


def _resolved(profile: DeviceProfile, requested: str, host: HostInfo) -> ResolvedDevice:
    if profile.torch_device == "cuda" and not host.cuda_devices:
        raise UnavailableError(f"{profile.display_name} needs CUDA, and torch sees no CUDA device on this host.")
    generic = "generic" in profile.name
    note = "no specific profile matches this hardware; using a generic one" if generic else "matched by detection"
    return ResolvedDevice(
        profile=profile,
        torch_device=torch.device("cuda:0" if profile.torch_device == "cuda" else "cpu"),
        requested=requested,
        note=note,
    )
