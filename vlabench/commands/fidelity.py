"""``vlabench fidelity``: open-loop action errors and closed-loop task success of every action-expert optimization."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel
from rich.table import Table

from vlabench.atomic import atomic_write_text
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.optimizations.fidelity import ActionError, FidelityVariant, default_variants, open_loop


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


class FidelityReport(BaseModel):
    kind: Literal["fidelity"] = "fidelity"
    started_utc: datetime
    model: str
    seed: int
    open_loop_reference: str = "fp32 eager torch exact path, same weights, observations and noise"
    open_loop: list[OpenLoopRow]
    closed_loop_task: str | None = None
    closed_loop: list[ClosedLoopRow]


def run_fidelity(
    model: str, observations: int, episodes: int, seed: int, out_dir: Path, actions_per_chunk: int = 4
) -> tuple[FidelityReport, Path]:
    spec = load_model_spec(model)
    workload = Workload.from_spec(spec)
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
    started = datetime.now(timezone.utc)
    report = FidelityReport(
        started_utc=started, model=model, seed=seed, open_loop=rows, closed_loop_task=task, closed_loop=closed
    )
    path = out_dir / f"{started.strftime('%Y%m%dT%H%M%SZ')}_{model}.fidelity.json"
    return report, atomic_write_text(path, report.model_dump_json(indent=2))


def fidelity_tables(report: FidelityReport) -> list[Table]:
    table = Table(
        title=f"Open loop: {report.model}, {report.open_loop[0].error.samples} observations vs the exact path"
    )
    for column in ("variant", "max abs", "RMSE", "cosine", "relative"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in report.open_loop:
        e = row.error
        table.add_row(row.variant.name, f"{e.max_abs:.4g}", f"{e.rmse:.4g}", f"{e.cosine:.6f}", f"{e.relative:.4g}")
    tables = [table]
    if report.closed_loop:
        closed = Table(title=f"Closed loop: {report.closed_loop_task}")
        for column in ("variant", "success", "rate", "mean final distance m", "expert calls per chunk"):
            closed.add_column(column, justify="left" if column == "variant" else "right")
        for row in report.closed_loop:
            closed.add_row(
                row.variant,
                f"{row.successes}/{row.episodes}",
                f"{row.success_rate:.0%}",
                f"{row.mean_final_distance_m:.4f}",
                f"{row.expert_calls_per_chunk:.1f}",
            )
        tables.append(closed)
    return tables
