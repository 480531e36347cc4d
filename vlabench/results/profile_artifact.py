"""The ``vlabench profile`` artifact: the passes run, the per-phase summary with its roofline verdict, the measured
ceilings and the SM tracing; ``commands/profile.py`` produces it."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, BaseModel, Field

from vlabench.analysis.phase_summary import PhaseSummary, SmTracing
from vlabench.analysis.roofline import RooflineReport
from vlabench.kernels.ceilings import MeasuredCeiling
from vlabench.models.workload import Workload
from vlabench.results.header import MeasuredArtifact

PROFILE_SCHEMA_VERSION = "1.1"
"""1.0: the artifact header (``schema_version`` and ``finished_utc`` added to the profile of before). 1.1: the SM
columns of each summary row (``sm_activity``, ``sm_occupancy``, ``tensor_activity``, ``dram_utilization``,
``gpu_busy``, each a value and its source) and ``sm_tracing`` (GPU SM limits, GPM pass, kernel coverage)."""


class PassRecord(BaseModel):
    name: Literal["ceilings", "trace", "gpm", "operators"]
    produced: str
    iterations: int
    duration_s: float
    instruments: list[str]


class ProfileResult(MeasuredArtifact):
    """``<stem>.profile.json``; the Chrome trace beside it (``trace_file``, ``<stem>.trace.json``) is no artifact."""

    kind: Literal["profile"] = "profile"
    schema_version: str = PROFILE_SCHEMA_VERSION
    torch_device: str
    backend_details: dict[str, Any]
    workload: Workload
    passes: list[PassRecord]
    counters: list[dict[str, Any]] = Field(
        validation_alias=AliasChoices("counters", "samplers"),  # "samplers" in profiles before this name
        description="the utilization counters read through the trace pass: source and period",
    )
    measured_ceilings: list[MeasuredCeiling]
    summary: list[PhaseSummary]
    roofline: RooflineReport
    sm_tracing: SmTracing | None = None  # absent from profiles of schema 1.0
    trace_file: str
    energy: None = None  # never measured in a profiling pass
    warnings: list[str]

    FILE_SUFFIX: ClassVar[str] = ".profile.json"

    def stem(self) -> str:
        parts = (self.model, self.device, self.backend, self.precision, self.run_id[:8])
        return "_".join((self.stamp(self.started_utc), *parts))
