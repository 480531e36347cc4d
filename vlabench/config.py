"""Run configuration: every knob of ``vlabench run``, with the defaults the CLI prints."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "smolvla"
    device: str = "auto"
    backend: str = "torch"
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
