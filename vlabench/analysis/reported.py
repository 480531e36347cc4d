"""Published latencies (``profiles/reported/latencies.yaml``), each with its source: the ground truth the projection
model is fitted on and scored against (``projection_score``). These figures are ``reported``, never presented as
vlabench measurements."""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vlabench.yaml_data import load_packaged


class ReportedLatency(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    device: str
    precision: str
    cameras: int = Field(gt=0)
    steps: int = Field(gt=0)
    stack: Literal["jax", "pytorch-eager", "pytorch-compiled", "tuned-kernels", "tensorrt", "ggml"]
    phases_ms: dict[Literal["vision", "prefill", "action", "e2e"], float]
    source: str
    prompt_tokens: int | None = Field(
        default=None, ge=0, description="instruction tokens the source states (the projection uses the model's own)"
    )
    assumed: list[str] = Field(default_factory=list, description="workload knobs the source does not state")
    label: Literal["reported"] = "reported"


class ReportedLatencies(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: list[ReportedLatency]


@cache
def reported_latencies() -> list[ReportedLatency]:
    """Every published latency, in file order."""
    return load_packaged("reported", "latencies", ReportedLatencies, "reported latencies").entries
