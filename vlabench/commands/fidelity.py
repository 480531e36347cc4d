"""``vlabench fidelity``: open-loop action errors and closed-loop task success of every action-expert optimization."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from vlabench.atomic import atomic_write_text
from vlabench.commands.calibrate import candidate_for, fuse_refusal, plan_target
from vlabench.hardware.detection import detect_host
from vlabench.optimizations.candidates import EXACT
from vlabench.optimizations.fidelity import default_variants, open_loop
from vlabench.results.fidelity_artifact import ClosedLoopRow, FidelityReport, OpenLoopRow, SkippedVariant
from vlabench.results.provenance import collect_provenance

if TYPE_CHECKING:
    from vlabench.optimizations.closed_loop.evaluate import EpisodeStats

EXACT_ROW = "exact"  # the fp32 exact sampler's closed-loop row; the other precisions' rows follow it


def run_fidelity(
    model: str,
    observations: int,
    episodes: int,
    seed: int,
    out_dir: Path,
    actions_per_chunk: int = 4,
    closed_loop_precisions: Sequence[str] | None = None,
    **target,
) -> tuple[FidelityReport, Path]:
    """``target``: device, backend, precision, checkpoint, as ``plan_target`` takes them (default: seeded weights,
    fp32 eager torch on the auto-resolved device). ``closed_loop_precisions``: the exact sampler again with the
    trained policy at each (bf16, int8, fp8, int4: the torch backend's CPU quantizers; None: all four), on the same
    episodes as the fp32 rows; one that cannot run here is skipped with its reason."""
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
    task, precisions = None, []
    if episodes:
        from vlabench.optimizations.closed_loop.evaluate import EXPERT_VARIANT, closed_loop_variants, evaluate
        from vlabench.optimizations.closed_loop.precision import PRECISIONS, precision_success_rates
        from vlabench.optimizations.closed_loop.train import load_or_train

        policy = load_or_train(seed)
        task = (
            "Gymnasium MuJoCo Reacher-v5 (headless), vlabench's flow-matching policy trained on scripted demos, "
            f"{actions_per_chunk} of 8 actions executed per chunk"
        )
        closed = [
            _closed_row(s, None if s.variant == EXPERT_VARIANT else "fp32")
            for s in evaluate(policy, closed_loop_variants(policy.steps), episodes, seed, actions_per_chunk)
        ]
        precisions = list(PRECISIONS if closed_loop_precisions is None else closed_loop_precisions)
        at_precisions, refused = precision_success_rates(policy, precisions, episodes, seed, actions_per_chunk)
        after_exact = next((i + 1 for i, row in enumerate(closed) if row.variant == EXACT_ROW), len(closed))
        closed[after_exact:after_exact] = [
            _closed_row(p.stats, p.precision, p.scheme, p.float_linears) for p in at_precisions
        ]
        skipped += [SkippedVariant(variant=f"{name} (closed loop)", reason=reason) for name, reason in refused]
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
        closed_loop_precisions=precisions,
        closed_loop=closed,
    )
    return report, atomic_write_text(out_dir / report.file_name(), report.model_dump_json(indent=2))


def _closed_row(
    stats: EpisodeStats, precision: str | None, scheme: str | None = None, float_linears: Sequence[str] = ()
) -> ClosedLoopRow:
    """One closed-loop row: a variant's task success and the precision of the policy that ran it."""
    return ClosedLoopRow(
        variant=stats.variant,
        episodes=stats.episodes,
        successes=stats.successes,
        success_rate=stats.success_rate,
        mean_final_distance_m=stats.mean_final_distance,
        expert_calls_per_chunk=stats.expert_calls_per_chunk,
        precision=precision,
        scheme=scheme,
        float_linears=list(float_linears),
    )
