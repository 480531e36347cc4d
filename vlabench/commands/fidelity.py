"""``vlabench fidelity``: open-loop action errors and closed-loop task success of every action-expert optimization."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar, Literal

import torch
from pydantic import AwareDatetime, BaseModel, Field

from vlabench.atomic import atomic_write_text
from vlabench.hardware.detection import detect_host
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.optimizations.fidelity import ActionError, FidelityVariant, default_variants, open_loop
from vlabench.results.header import ArtifactHeader
from vlabench.results.provenance import collect_provenance

FIDELITY_SCHEMA_VERSION = "1.0"
"""1.0: the artifact header (``schema_version``, ``run_id``, ``finished_utc``, device/backend/precision and
provenance added to the fidelity report of before)."""


class OpenLoopRow(BaseModel):
    variant: FidelityVariant
    error: ActionError


class ClosedLoopRow(BaseModel):
    variant: str
    episodes: int
    successes: int
    success_rate: float
    mean_final_distance_m: float
    expert_calls_per_chunk: float


class FidelityReport(ArtifactHeader):
    kind: Literal["fidelity"] = "fidelity"
    schema_version: str = FIDELITY_SCHEMA_VERSION
    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    started_utc: AwareDatetime
    model: str
    device: str | None = Field(default="cpu", description="open and closed loops run on the CPU")
    backend: str | None = "torch"
    precision: str | None = "fp32"
    seed: int
    open_loop_reference: str = "fp32 eager torch exact path, same weights, observations and noise"
    open_loop: list[OpenLoopRow]
    closed_loop_task: str | None = None
    closed_loop: list[ClosedLoopRow]

    FILE_SUFFIX: ClassVar[str] = ".fidelity.json"

    def stem(self) -> str:
        return f"{self.stamp(self.started_utc)}_{self.model}"


def run_fidelity(
    model: str, observations: int, episodes: int, seed: int, out_dir: Path, actions_per_chunk: int = 4
) -> tuple[FidelityReport, Path]:
    spec = load_model_spec(model)
    workload = Workload.from_spec(spec)
    started = datetime.now(timezone.utc)
    cpu = torch.device("cpu")
    rows = [
        OpenLoopRow(variant=variant, error=error)
        for variant, error in open_loop(spec, workload, observations, default_variants(workload.steps), seed, cpu)
    ]
    closed: list[ClosedLoopRow] = []
    task = None
    if episodes:
        from vlabench.optimizations.closed_loop.evaluate import closed_loop_variants, evaluate
        from vlabench.optimizations.closed_loop.train import load_or_train

        policy = load_or_train(seed)
        task = (
            "Gymnasium MuJoCo Reacher-v5 (headless), vlabench's flow-matching policy trained on scripted demos, "
            f"{actions_per_chunk} of 8 actions executed per chunk"
        )
        closed = [
            ClosedLoopRow(
                variant=s.variant,
                episodes=s.episodes,
                successes=s.successes,
                success_rate=s.success_rate,
                mean_final_distance_m=s.mean_final_distance,
                expert_calls_per_chunk=s.expert_calls_per_chunk,
            )
            for s in evaluate(policy, closed_loop_variants(policy.steps), episodes, seed, actions_per_chunk)
        ]
    report = FidelityReport(
        started_utc=started,
        finished_utc=datetime.now(timezone.utc),
        model=model,
        provenance=collect_provenance(detect_host(), torch.get_num_threads()),
        seed=seed,
        open_loop=rows,
        closed_loop_task=task,
        closed_loop=closed,
    )
    return report, atomic_write_text(out_dir / report.file_name(), report.model_dump_json(indent=2))
