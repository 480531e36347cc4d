"""Run configuration: every knob of ``vlabench run``, with the defaults the CLI prints."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "smolvla"
    device: str = "auto"
    backend: str = Field(default="torch", description="a backend, a comma-separated list, or all")
    ep: str | None = Field(default=None, description="onnxruntime execution provider (cpu, cuda, tensorrt, ...)")
    device_target: str | None = Field(default=None, description="openvino device (CPU, GPU, NPU, ...)")
    compile_mode: str = Field(default="default", description="torch.compile mode for the torch-compile backend")
    fuse_denoise_loop: bool = Field(default=False, description="torch-compile on CUDA: one CUDA graph per loop")
    precision: str | None = Field(default=None, description="None: fp32 on CPUs, bf16 on CUDA")
    cameras: int | None = Field(default=None, gt=0, description="None: the model's default")
    steps: int | None = Field(default=None, gt=0, description="None: the model's default")
    chunk: int | None = Field(default=None, gt=0, description="None: the model's default")
    actions_per_chunk: int | None = Field(default=None, gt=0, description="None: the model's default")
    warmup: int = Field(default=2, ge=0)
    min_iterations: int = Field(default=10, gt=0)
    min_duration_s: float = Field(default=10.0, ge=0)
    max_iterations: int = Field(default=1000, gt=0)
    control_hz: float = Field(default=10.0, gt=0)
    seed: int = 0
    threads: int | None = Field(default=None, gt=0, description="torch intra-op threads; None: torch's default")
    out: Path = Path("results")
    energy_meter: str = Field(
        default="auto", description="auto, nvml, jetson-ina3221, tegrastats, rapl, estimated, none"
    )
    energy_log: Path | None = Field(default=None, description="CSV power log of an external (wall) meter")
    energy_window_s: float = Field(default=2.0, ge=1.0, description="energy is measured over whole inferences ≥ this")
    idle_window_s: float = Field(default=1.0, gt=0, description="idle power is measured over this window first")
    tdp_w: float | None = Field(default=None, gt=0, description="override the profile's TDP for estimated energy")
    idle_w: float | None = Field(default=None, ge=0, description="override the idle power for estimated energy")
    price_usd: float | None = Field(default=None, gt=0, description="override the profile's purchase price")
    lifetime_years: float = Field(default=3.0, gt=0)
    duty_cycle: float = Field(default=0.5, gt=0, le=1)
    usd_per_kwh: float = Field(default=0.15, ge=0)
    measure_ceilings: bool = Field(default=False, description="measure GEMM peak and bandwidth before timing")
    dp_cache: str | None = Field(default=None, description="DP-Cache schedule: a step set, segment:A-B/S, or a file")
    checkpoint: Path | None = Field(
        default=None, description="lerobot model.safetensors (or its folder) to load instead of seeded weights"
    )
    fuse_expert_kv: bool = Field(default=False, description="torch: hoist the expert's prefix K/V work out of the loop")
