"""The ``vlabench fidelity`` artifact: open-loop action errors and closed-loop task success of every action-expert
optimization; ``commands/fidelity.py`` produces it."""

from __future__ import annotations

import uuid
from typing import ClassVar, Literal

from pydantic import AwareDatetime, BaseModel, Field

from vlabench.optimizations.fidelity import ActionError, FidelityVariant
from vlabench.results.header import ArtifactHeader
from vlabench.results.task_success import TaskSuccessReport

FIDELITY_SCHEMA_VERSION = "1.3"
"""1.0: the artifact header (``schema_version``, ``run_id``, ``finished_utc``, device/backend/precision and
provenance added to the fidelity report of before). 1.1: ``checkpoint``, ``open_loop_candidate`` and ``skipped``;
device/backend/precision are the open loop's (``--device``, ``--backend``, ``--precision``). 1.2: closed-loop rows of
the exact loop with the policy at other precisions (``exact bf16``, ``exact int8``, ``exact int4``; a row's
``precision``, ``scheme`` and ``float_linears``) and ``closed_loop_precisions``; older files read as fp32 rows. 1.3:
``task_success``, the closed loop of a model vlabench trained (``results.task_success``); absent in older files."""


class OpenLoopRow(BaseModel):
    variant: FidelityVariant
    error: ActionError


class SkippedVariant(BaseModel):
    variant: str
    reason: str


class ClosedLoopRow(BaseModel):
    variant: str
    episodes: int
    successes: int
    success_rate: float
    mean_final_distance_m: float
    expert_calls_per_chunk: float
    precision: str | None = Field(default="fp32", description="the policy's precision; None: the scripted expert")
    scheme: str | None = Field(default=None, description="how the policy was cast or quantized; None: fp32")
    float_linears: list[str] = Field(default_factory=list, description="Linear layers the quantizer left in fp32")


class FidelityReport(ArtifactHeader):
    kind: Literal["fidelity"] = "fidelity"
    schema_version: str = FIDELITY_SCHEMA_VERSION
    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    started_utc: AwareDatetime
    model: str
    device: str | None = Field(default="cpu", description="the open loop's device (the closed loop runs on the CPU)")
    backend: str | None = Field(default="torch", description="the open loop's backend (what computed the variants)")
    precision: str | None = "fp32"
    checkpoint: str | None = Field(default=None, description="the open loop's weights: None seeded, else the stamp")
    seed: int
    open_loop_reference: str = "fp32 eager torch exact path, same weights, observations and noise"
    open_loop_candidate: str = Field(default="fp32 eager torch", description="what computed the variants' actions")
    open_loop: list[OpenLoopRow]
    skipped: list[SkippedVariant] = Field(default_factory=list, description="variants that do not apply here, why")
    closed_loop_task: str | None = None
    closed_loop_precisions: list[str] = Field(
        default_factory=list, description="policy precisions asked for besides fp32 (exact loop; skipped ones too)"
    )
    closed_loop: list[ClosedLoopRow]
    task_success: TaskSuccessReport | None = Field(
        default=None, description="a trained model's benchmark: success per variant, interval, difference, speedup"
    )

    FILE_SUFFIX: ClassVar[str] = ".fidelity.json"

    def stem(self) -> str:
        return f"{self.stamp(self.started_utc)}_{self.model}"
