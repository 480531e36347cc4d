"""Device profiles (``profiles/devices/*.yaml``), host detection and ``--device`` resolution."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from vlabench.errors import UnavailableError, unknown_name
from vlabench.hardware.detection import HostInfo, detect_host
from vlabench.yaml_data import load_packaged, packaged_names

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

    cpu_model: str | None = Field(default=None, description="matched against /proc/cpuinfo's model name")
    cuda_name: str | None = Field(default=None, description="matched against NVML / torch CUDA device names")
    jetson_model: str | None = Field(default=None, description="matched against /proc/device-tree/model")
    openvino_device: str | None = Field(default=None, description="matched against OpenVINO FULL_DEVICE_NAMEs")
    ascend_chip: str | None = Field(default=None, description="matched against `npu-smi info` chip names")
    arch: str | None = Field(default=None, description="matched against platform.machine()")
    memory_gb_between: tuple[float, float] | None = Field(
        default=None,
        description="the host's visible memory (GB) must lie in [low, high): tells apart SKUs that report one string",
    )


PeakPrecision = Literal["fp32", "fp16", "bf16", "int8", "fp8"]
SensorName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$")]
"""A power sensor the device has, by the name of the energy meter that reads it (``EnergyMeter.sensor``). The meters
are registered in telemetry (a layer above), so the name is checked there: ``telemetry.energy.select.sensor_names``
(a sensor no meter reads yet, such as ``npu-smi``, is noted when a run picks its meter)."""


class Price(BaseModel):
    """Purchase price; ``estimate`` marks street or analyst prices rather than a vendor list price."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd: float = Field(gt=0)
    source: str
    url: str
    date: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$", description="when the price applied, YYYY-MM[-DD]")
    estimate: bool = False


class PowerMode(BaseModel):
    """A power mode (Jetson nvpmodel) and, where its source states them, the share of the profile's peak compute and
    memory bandwidth it keeps and its CPU clock (None: the profile's own, i.e. the maximum)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    watts: float = Field(gt=0)
    source: str
    compute_share: float | None = Field(
        default=None, gt=0, le=1, description="GPU clock cap x enabled TPCs, over the maximum the peaks are quoted at"
    )
    memory_share: float | None = Field(default=None, gt=0, le=1, description="EMC clock cap over its maximum")
    cpu_ghz: float | None = Field(default=None, gt=0, le=10, description="the mode's CPU clock cap")


class Engine(BaseModel):
    """A compute engine a backend can target on a multi-engine device (e.g. Core Ultra CPU, iGPU and NPU)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["cpu", "gpu", "npu", "dla"]
    openvino_device: str | None = None
    peak_tflops: dict[PeakPrecision, Figure] = Field(default_factory=dict)


DeviceClass = Literal["datacenter-gpu", "desktop-gpu", "jetson", "npu", "cpu"]


class HostCpu(BaseModel):
    """The CPU on the device's own board or module, which launches its kernels (discrete cards have none: they run
    in whatever host they are plugged into)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    core: str = Field(description="the core microarchitecture, e.g. cortex-a78ae: the host's single-thread class")
    cores: int = Field(gt=0)
    max_ghz: float = Field(gt=0, le=10)
    source: str


class DeviceProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    display_name: str
    kind: Literal["cpu", "gpu", "soc", "npu", "xpu"]
    device_class: DeviceClass = Field(description="the projection model's hierarchy: which class prior it pools into")
    host_cpu: HostCpu | None = Field(default=None, description="the on-board CPU; None for a discrete card")
    vendor: str
    torch_device: Literal["cpu", "cuda", "xpu", "npu"]
    detect: Detection
    memory_gb: Figure | None = None
    usable_memory_gb: Figure | None = Field(
        default=None,
        description="memory a model may use where the OS and the CUDA context share it (unified-memory SoCs)",
    )
    bandwidth_gbs: Figure | None = None
    peak_tflops: dict[PeakPrecision, Figure] = Field(default_factory=dict)
    tdp_w: Figure | None = None
    idle_w: Figure | None = Field(default=None, description="idle power, for estimated energy")
    power_modes: list[PowerMode] = Field(default_factory=list)
    price: Price | None = None
    sensors: list[SensorName] = Field(default_factory=list)
    backends: list[str] = Field(default_factory=list, description="runtimes that serve this device")
    engines: dict[str, Engine] = Field(default_factory=dict)
    ceilings_measured: bool = Field(default=False, description="peak and bandwidth come from micro-benchmarks")
    notes: str = ""

    @property
    def usable_gb(self) -> float | None:
        """Memory a model may use: the usable figure, else the nameplate, else None (unknown)."""
        figure = self.usable_memory_gb or self.memory_gb
        return figure.value if figure else None


@dataclass(frozen=True)
class ResolvedDevice:
    """The profile a run uses and the torch device it runs on."""

    profile: DeviceProfile
    torch_device: torch.device
    requested: str
    note: str


def profile_names() -> list[str]:
    return packaged_names("devices")


@cache
def load_device_profile(name: str) -> DeviceProfile:
    names = profile_names()
    if name not in names:
        raise unknown_name("device", name, [*names, *FAMILY_ALIASES])
    return load_packaged("devices", name, DeviceProfile, "device profile")


def all_profiles() -> list[DeviceProfile]:
    return [load_device_profile(name) for name in profile_names()]


def _matches(pattern: str | None, value: str | None) -> bool:
    return bool(pattern and value and re.search(pattern, value, flags=re.IGNORECASE))


def profile_present(profile: DeviceProfile, host: HostInfo) -> bool:
    """Whether the hardware a profile describes is on this host (its most specific rule decides, and the host's
    memory lies in the profile's range where it states one)."""
    rules = profile.detect
    if rules.memory_gb_between is not None:
        low, high = rules.memory_gb_between
        if not low <= host.memory_gb < high:
            return False
    if rules.jetson_model:
        return _matches(rules.jetson_model, host.jetson_model)
    if rules.cuda_name:
        return any(_matches(rules.cuda_name, name) for name in host.cuda_devices)
    if rules.ascend_chip:
        return any(_matches(rules.ascend_chip, chip) for chip in host.ascend_chips)
    if rules.openvino_device and not rules.cpu_model:
        return any(_matches(rules.openvino_device, name) for name in host.openvino_devices)
    if rules.cpu_model:
        return _matches(rules.cpu_model, host.cpu_model)
    return _matches(rules.arch, host.arch)


def detected_profiles(host: HostInfo) -> list[DeviceProfile]:
    """Profiles present on this host, most specific first (Jetson, GPU, named CPU, generic CPU)."""

    def specificity(profile: DeviceProfile) -> int:
        rules = profile.detect
        ranks = (rules.jetson_model, rules.cuda_name, rules.ascend_chip, rules.openvino_device, rules.cpu_model)
        return next((i for i, rule in enumerate(ranks) if rule), len(ranks))

    usable = (p for p in all_profiles() if profile_present(p, host) and (p.torch_device != "cuda" or host.torch_cuda))
    return sorted(usable, key=specificity)


def _fallback_cpu_profile(host: HostInfo) -> DeviceProfile:
    """A profile synthesized from detection for a CPU no profile describes."""
    return DeviceProfile(
        name=f"generic-{host.arch}-cpu",
        display_name=f"{host.cpu_model} (generic)",
        kind="cpu",
        device_class="cpu",
        vendor="unknown",
        torch_device="cpu",
        detect=Detection(arch=re.escape(host.arch)),
        memory_gb=Figure(value=round(host.memory_gb, 1), source="detected on this host (psutil)"),
        notes="built from detection; no datasheet figures",
    )


def resolve_device(
    requested: str, host: HostInfo | None = None, reachable: Callable[[DeviceProfile], bool] | None = None
) -> ResolvedDevice:
    """Turn ``--device`` (a profile name or a family alias) into a profile present on this host. ``auto`` picks the
    first present profile that ``reachable`` accepts (the chosen backend can execute on its engine)."""
    host = host or detect_host()
    present = detected_profiles(host)
    if requested in ("auto", "host"):
        candidates = [p for p in present if reachable is None or reachable(p)]
        choice = candidates[0] if candidates else _fallback_cpu_profile(host)
        return _resolved(choice, requested, host)
    if requested == "cpu":
        cpus = [p for p in present if p.kind == "cpu"] or [_fallback_cpu_profile(host)]
        return _resolved(cpus[0], requested, host)
    if requested in ("cuda", "gpu"):
        gpus = [p for p in present if p.torch_device == "cuda"]
        if host.cuda_devices and not host.torch_cuda:
            raise UnavailableError(
                f"--device {requested}: NVML sees {', '.join(host.cuda_devices)} but torch {torch.__version__} cannot "
                f"use CUDA (CUDA build: {torch.version.cuda or 'no'}; check CUDA_VISIBLE_DEVICES). Install a CUDA "
                "build of torch, or use --device cpu."
            )
        if not host.cuda_devices:
            raise UnavailableError(
                f"--device {requested}: no CUDA device on this host (torch {torch.__version__}, "
                f"CUDA build: {torch.version.cuda or 'no'}). Detected: {host.describe()}. Use --device cpu or auto."
            )
        return _resolved(gpus[0] if gpus else _fallback_cuda_profile(host), requested, host)
    if requested == "jetson":
        jetsons = [p for p in all_profiles() if p.detect.jetson_model and profile_present(p, host)]
        if not jetsons:
            raise UnavailableError(
                f"--device jetson: this host is not a Jetson (detected: {host.describe()}). Run vlabench on the "
                "Jetson itself, or pick a profile present here with --device auto."
            )
        _require_torch_cuda(jetsons[0], host, requested)
        return _resolved(jetsons[0], requested, host)
    profile = load_device_profile(requested)
    if profile_present(profile, host):
        _require_torch_cuda(profile, host, requested)
    if profile not in present:
        raise UnavailableError(
            f"--device {requested}: {profile.display_name} is not present on this host (detected: "
            f"{host.describe()}). Run on that hardware, or use --device auto."
        )
    return _resolved(profile, requested, host)


def _require_torch_cuda(profile: DeviceProfile, host: HostInfo, requested: str) -> None:
    if profile.torch_device == "cuda" and not host.torch_cuda:
        raise UnavailableError(
            f"--device {requested}: {profile.display_name} is here, but torch {torch.__version__} cannot use CUDA "
            f"(CUDA build: {torch.version.cuda or 'no'}). Install the platform's CUDA build of torch "
            "(on Jetson: NVIDIA's wheel for your JetPack), or use --device cpu."
        )


def _fallback_cuda_profile(host: HostInfo) -> DeviceProfile:
    return DeviceProfile(
        name="generic-cuda-gpu",
        display_name=f"{host.cuda_devices[0]} (generic)",
        kind="gpu",
        device_class="desktop-gpu",
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
