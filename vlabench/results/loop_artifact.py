"""The ``vlabench loop`` artifact: the exact and the V-AEFusion control loop, cycle by cycle; ``commands/loop.py``
produces it."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.stats import Stats
from vlabench.models.workload import Workload
from vlabench.results.header import MeasuredArtifact

LOOP_SCHEMA_VERSION = "1.0"
"""1.0: the artifact header (``schema_version`` and ``finished_utc`` added to the loop result of before)."""


class LoopVariant(BaseModel):
    stale_steps: int
    cycle_ms: Stats
    overlap_ms: Stats
    action_hz_p50: float
    samples_ms: list[float]


class LoopResult(MeasuredArtifact):
    kind: Literal["loop"] = "loop"
    schema_version: str = LOOP_SCHEMA_VERSION
    backend_details: dict[str, Any]
    workload: Workload
    dp_cache: DPCacheSchedule | None
    fuse_expert_kv: bool
    concurrency: str
    cycles: int = Field(description="counted cycles per variant")
    exact: LoopVariant
    fused: LoopVariant
    speedup_p50: float = Field(description="exact cycle p50 / fused cycle p50")
    warnings: list[str]

    FILE_SUFFIX: ClassVar[str] = ".loop.json"

    def stem(self) -> str:
        parts = (self.model, self.device, self.backend, self.precision, f"s{self.fused.stale_steps}", self.run_id[:8])
        return "_".join((self.stamp(self.started_utc), *parts))
