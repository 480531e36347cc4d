"""Published latencies (``profiles/reported/latencies.yaml``), each with its source: the ground truth the projection
model is fitted on and scored against (``projection_score``). These figures are ``reported``, never presented as
vlabench measurements."""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vlabench.analysis.projection_stacks import get_stack
from vlabench.errors import InputError
from vlabench.yaml_data import load_packaged

ReportedPhase = Literal["vision", "prefill", "prefix", "action", "e2e"]
"""A published phase: ``prefix`` is vision + prefill where a source does not split them."""
PREFIX_PARTS = ("vision", "prefill")
ROUNDING = 1.05
"""Published parts may sum above their e2e by their rounding (GR00T's whole-millisecond columns)."""


class ReportedLatency(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    device: str
    precision: str
    cameras: int = Field(gt=0)
    prompt_tokens: int | None = Field(
        default=None, ge=0, description="instruction tokens the source states (None: the model's own length)"
    )
    steps: int = Field(gt=0)
    chunk: int | None = Field(default=None, gt=0, description="actions per chunk the source states (None: the model's)")
    batch: int = Field(default=1, gt=0)
    power_mode: str | None = Field(default=None, description="the Jetson nvpmodel mode the source states")
    stack: str = Field(description="a stack of profiles/reported/stacks.yaml")
    phase_stacks: dict[Literal["vision", "prefill", "prefix", "action"], str] = Field(
        default_factory=dict, description="a phase run by another stack than ``stack`` (prefix: vision and prefill)"
    )
    phases_ms: dict[ReportedPhase, float]
    host_ms: float = Field(
        default=0.0, ge=0, description="host-side data processing the source includes in its e2e (not projected)"
    )
    group: str | None = Field(
        default=None,
        min_length=1,
        description="publisher and harness, which leave-one-source-out holds out together (None: its own source)",
    )
    source: str
    assumed: list[str] = Field(default_factory=list, description="workload knobs the source does not state")
    label: Literal["reported"] = "reported"

    @model_validator(mode="after")
    def _check_stacks(self) -> ReportedLatency:
        for name in (self.stack, *self.phase_stacks.values()):
            try:
                get_stack(name)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _check_phases(self) -> ReportedLatency:
        phases = self.phases_ms
        if any(not value > 0 for value in phases.values()):
            raise ValueError(f"{self.model} on {self.device}: every published phase must be a positive latency")
        if "prefix" in phases and any(part in phases for part in PREFIX_PARTS):
            raise ValueError("give prefix or its parts (vision, prefill), not both")
        if "e2e" in phases:
            parts = phases.get("prefix", sum(phases.get(p, 0.0) for p in PREFIX_PARTS)) + phases.get("action", 0.0)
            if parts + self.host_ms > phases["e2e"] * ROUNDING:
                raise ValueError(f"{self.model} on {self.device}: its phases and host time exceed its e2e")
        return self

    @property
    def source_group(self) -> str:
        """The group leave-one-source-out holds out with this entry: its ``group``, else its own source."""
        return self.group or self.source

    @property
    def model_e2e_ms(self) -> float | None:
        """The published e2e without the host-side data processing the projection does not model."""
        return self.phases_ms["e2e"] - self.host_ms if "e2e" in self.phases_ms else None

    def stack_of(self, phase: str) -> str:
        """The stack that ran ``phase`` (vision, prefill or action)."""
        if phase in self.phase_stacks:
            return self.phase_stacks[phase]
        if phase in PREFIX_PARTS and "prefix" in self.phase_stacks:
            return self.phase_stacks["prefix"]
        return self.stack


class ReportedLatencies(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: list[ReportedLatency]


@cache
def reported_latencies() -> list[ReportedLatency]:
    """Every published latency, in file order."""
    return load_packaged("reported", "latencies", ReportedLatencies, "reported latencies").entries
