"""``vlabench fidelity``: open-loop action errors and closed-loop task success of every action-expert optimization."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar, Literal

import torch
from pydantic import AwareDatetime, BaseModel, Field

from vlabench.atomic import atomic_write_text
from vlabench.commands.calibrate import candidate_for, fuse_refusal, plan_target
from vlabench.hardware.detection import detect_host
from vlabench.optimizations.candidates import EXACT
from vlabench.optimizations.fidelity import ActionError, FidelityVariant, default_variants, open_loop
from vlabench.results.header import ArtifactHeader
from vlabench.results.provenance import collect_provenance

FIDELITY_SCHEMA_VERSION = "1.1"
"""1.0: the artifact header (``schema_version``, ``run_id``, ``finished_utc``, device/backend/precision and
provenance added to the fidelity report of before). 1.1: ``checkpoint``, ``open_loop_candidate`` and ``skipped``;
device/backend/precision are the open loop's (``--device``, ``--backend``, ``--precision``)."""


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
    closed_loop: list[ClosedLoopRow]

    FILE_SUFFIX: ClassVar[str] = ".fidelity.json"

    def stem(self) -> str:
        return f"{self.stamp(self.started_utc)}_{self.model}"


def run_fidelity(
    model: str,
    observations: int,
    episodes: int,
    seed: int,
    out_dir: Path,
    actions_per_chunk: int = 4,
    **target,
) -> tuple[FidelityReport, Path]:
    """``target``: device, backend, precision, checkpoint, as ``plan_target`` takes them (default: seeded weights,
    fp32 eager torch on the auto-resolved device)."""
    plan = plan_target(model, "open-loop fidelity", seed=seed, **target)
    spec, workload = plan.spec, plan.workload
    started = datetime.now(timezone.utc)
    refusal = fuse_refusal(plan)
    variants, skipped = [], []
    for variant in default_variants(workload.steps):
        if variant.fuse_expert_kv and refusal:
            skipped.append(SkippedVariant(variant=variant.name, reason=refusal))
        else:
            variants.append(variant)
    candidate = candidate_for(plan)
    results = open_loop(spec, workload, observations, variants, seed, plan.device.torch_device, candidate)
    rows = [OpenLoopRow(variant=variant, error=error) for variant, error in results]
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
        model=spec.name,
        device=plan.device.profile.name,
        backend=plan.backend.name,
        precision=plan.precision,
        checkpoint=spec.checkpoint,
        open_loop_candidate=candidate.description if candidate else EXACT,
        skipped=skipped,
        provenance=collect_provenance(detect_host(), torch.get_num_threads()),
        seed=seed,
        open_loop=rows,
        closed_loop_task=task,
        closed_loop=closed,
    )
    return report, atomic_write_text(out_dir / report.file_name(), report.model_dump_json(indent=2))
