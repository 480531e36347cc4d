"""Machine state recorded with every run: background load, CPU governor and clocks, Jetson power mode, GPU state."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel


class SystemState(BaseModel):
    """State just before the model is loaded; ``None`` where this host does not expose a value."""

    background_cpu_percent: float
    load_average_1m: float | None
    cpu_governor: str | None
    cpu_freq_mhz: float | None
    cpu_freq_max_mhz: float | None
    jetson_power_mode: str | None
    gpu: dict[str, Any] | None


def read_cpu_governor(cpu_root: Path = Path("/sys/devices/system/cpu")) -> str | None:
    """The cpufreq scaling governor; 'mixed: a×g1, b×g2' when cores differ; None without cpufreq."""
    governors = Counter(
        path.read_text().strip() for path in sorted(cpu_root.glob("cpu[0-9]*/cpufreq/scaling_governor"))
    )
    if not governors:
        return None
    if len(governors) == 1:
        return next(iter(governors))
    return "mixed: " + ", ".join(f"{count}×{name}" for name, count in governors.most_common())


def parse_nvpmodel_query(output: str) -> str | None:
    """`nvpmodel -q` prints 'NV Power Mode: MAXN' (then the mode id) -> 'MAXN'."""
    match = re.search(r"NV Power Mode:\s*(\S+)", output)
    return match.group(1) if match else None


def read_jetson_power_mode() -> str | None:
    if not shutil.which("nvpmodel"):
        return None
    try:
        completed = subprocess.run(["nvpmodel", "-q"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvpmodel_query(completed.stdout)


def read_gpu_state(torch_device_type: str) -> dict[str, Any] | None:
    """NVML clocks, power limit, temperature and throttle reasons of GPU 0 when running on CUDA."""
    if torch_device_type != "cuda":
        return None
    from vlabench.errors import UnavailableError
    from vlabench.telemetry.energy.nvml import nvml_device_state

    try:
        return nvml_device_state(0)
    except UnavailableError as exc:
        return {"unavailable": str(exc)}
    except Exception as exc:  # an NVML error (no permission, MIG, WSL) must not stop the benchmark
        return {"unavailable": f"{type(exc).__name__}: {exc}"}


def sample_system_state(torch_device_type: str, window_s: float = 0.25) -> SystemState:
    """CPU busy share over a short window while vlabench itself is idle, plus clocks and power modes."""
    busy = psutil.cpu_percent(interval=window_s)
    frequency = psutil.cpu_freq()
    return SystemState(
        background_cpu_percent=busy,
        load_average_1m=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        cpu_governor=read_cpu_governor(),
        cpu_freq_mhz=frequency.current if frequency else None,
        cpu_freq_max_mhz=frequency.max if frequency and frequency.max else None,
        jetson_power_mode=read_jetson_power_mode(),
        gpu=read_gpu_state(torch_device_type),
    )
