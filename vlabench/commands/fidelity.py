"""``vlabench fidelity``: open-loop action errors and closed-loop task success of every action-expert optimization."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from vlabench.atomic import atomic_write_text
from vlabench.commands.calibrate import candidate_for, fuse_refusal, plan_target
from vlabench.commands.task_success import TaskSuccessRequest, parse_variants, run_task_success
from vlabench.errors import InputError
from vlabench.hardware.detection import detect_host
from vlabench.optimizations.candidates import EXACT
from vlabench.optimizations.fidelity import default_variants, open_loop
from vlabench.results.fidelity_artifact import ClosedLoopRow, FidelityReport, OpenLoopRow, SkippedVariant
from vlabench.results.provenance import collect_provenance

if TYPE_CHECKING:
    from vlabench.optimizations.closed_loop.evaluate import EpisodeStats

EXACT_ROW = "exact"  # the fp32 exact loop's closed-loop row; the other precisions' rows follow it
REACHER_CHUNK, REACHER_ACTIONS_PER_CHUNK = 8, 4


@dataclass(frozen=True)
class TaskSuccessOptions:
    """The closed loop of a trained model: which variants (``all`` or a comma list), tasks and episode length."""

    variants: str = "default"
    tasks: tuple[str, ...] | None = None
    max_steps: int = 200
    threads: int = 1


def run_fidelity(
    model: str,
    observations: int,
    episodes: int,
    seed: int,
    out_dir: Path,
    actions_per_chunk: int | None = None,
    closed_loop_precisions: Sequence[str] | None = None,
    task_success: TaskSuccessOptions | None = None,
    progress: Callable[[str], None] | None = None,
    **target,
) -> tuple[FidelityReport, Path]:
    """``target``: device, backend, precision, checkpoint, as ``plan_target`` takes them (default: seeded weights, or
    the model's trained ones, fp32 eager torch on the auto-resolved device). The closed loop: a model vlabench trained
    (``spec.trained``) plays its benchmark under every variant of ``task_success`` (``commands.task_success``);
    any other model is judged through the Reacher toy, whose ``closed_loop_precisions`` rows run the exact loop
    with its policy at each (bf16, int8, fp8, int4: the torch backend's CPU quantizers; None: all four), on the same
    episodes as the fp32 rows. A variant that cannot run here is skipped with its reason."""
    if actions_per_chunk is not None and actions_per_chunk < 1:
        raise InputError("--actions-per-chunk must be at least 1")
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
    task, precisions, success = None, [], None
    if episodes and spec.trained is not None:
        options = task_success or TaskSuccessOptions()
        request = TaskSuccessRequest(
            model,
            parse_variants(options.variants),
            target.get("checkpoint"),
            options.tasks,
            episodes,
            seed,
            actions_per_chunk,
            options.max_steps,
            target.get("device", "auto"),
            options.threads,
        )
        success, refused_variants = run_task_success(request, progress)
        skipped += refused_variants
        played = success.variants[0].episodes
        task = f"{success.benchmark}: {played} episodes over {len(success.tasks)} tasks, {model}'s trained weights"
    elif episodes:
        if actions_per_chunk is not None and actions_per_chunk > REACHER_CHUNK:
            raise InputError(f"--actions-per-chunk must be within 1..{REACHER_CHUNK} (the Reacher policy's chunk)")
        actions_per_chunk = actions_per_chunk or REACHER_ACTIONS_PER_CHUNK
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
        task_success=success,
    )
    return report, atomic_write_text(out_dir / report.file_name(), report.model_dump_json(indent=2))


def _closed_row(
    stats: EpisodeStats, precision: str | None, scheme: str | None = None, float_linears: Sequence[str] = ()
) -> ClosedLoopRow:
    """One closed-loop row: a variant's task success and the precision of the policy that ran it."""
    return ClosedLoopRow(**asdict(stats), precision=precision, scheme=scheme, float_linears=list(float_linears))
