"""``vlabench fidelity`` on a model vlabench trained: closed-loop task success of the reference and every variant.

The weights are the model's trained checkpoint (or ``--checkpoint``), loaded by ``vlabench run``'s planner
(``plan_target`` → ``plan_run`` → ``load_checkpoint``). Each variant is planned and prepared as ``vlabench run``
plans it (its backend, precision, step count, DP-Cache schedule, fused expert K/V; V-AEFusion as ``vlabench loop``
runs it), so success is measured for exactly what the other commands time. The reference is fp32 eager torch with
every step computed. A variant that cannot run here is skipped with the reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vlabench.backends import get_backend
from vlabench.commands.calibrate import fuse_refusal, plan_target
from vlabench.commands.run import RunPlan, backend_options, prepare_contender
from vlabench.errors import InputError, UnavailableError, unknown_name
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.stats import summarize
from vlabench.models.checkpoints import checkpoint_file
from vlabench.models.input_pipeline import InputPipeline
from vlabench.models.lerobot_folder import read_normalization, read_tokenizer, trained_checkpoint
from vlabench.models.specs import load_model_spec
from vlabench.optimizations.calibration import calibrate_dp_cache
from vlabench.optimizations.candidates import model_loop
from vlabench.optimizations.closed_loop.metaworld import TaskSet
from vlabench.optimizations.closed_loop.metaworld_eval import (
    EpisodePlan,
    PolicyVariant,
    VariantEpisodes,
    expert_episodes,
    random_episodes,
    run_episodes,
)
from vlabench.optimizations.fidelity import default_variants
from vlabench.results.fidelity_artifact import SkippedVariant
from vlabench.results.task_success import (
    TaskSuccessReport,
    VariantSuccess,
    compared,
    optimization_label,
    task_outcomes,
    variant_success,
)
from vlabench.vocab import Precision

REFERENCE = "reference"
CPU_BACKENDS = ("torch", "torch-compile", "onnxruntime", "openvino")
REDUCED = ("bf16", "int8", "int4")
CALIBRATION = {"observations": 32, "budget": 0.05}  # vlabench calibrate dp-cache's defaults
STALE_STEPS = 5  # V-AEFusion: the paper's middle setting (success collapsed from 7 of 10 on)


@dataclass(frozen=True)
class Setting:
    """One way of running the trained policy, by its ``--variants`` name."""

    name: str
    backend: str = "torch"
    precision: str = "fp32"
    dp_cache: str | None = None  # "default" (the paper's rMuscle set) or "calibrated"
    stale_steps: int = 0
    fuse_expert_kv: bool = False
    fewer_steps: bool = False


def all_settings() -> list[Setting]:
    """Every setting by name, reference first: each CPU backend at each precision, then the optimizations."""
    found = [Setting(REFERENCE)]
    for backend in CPU_BACKENDS:
        for precision in ("fp32", *REDUCED):
            if backend != "torch" or precision != "fp32":
                found.append(Setting(f"{backend}-{precision}", backend, precision))
    return [
        *found,
        Setting("dp-cache", dp_cache="default"),
        Setting("dp-cache-calibrated", dp_cache="calibrated"),
        Setting("v-aefusion", stale_steps=STALE_STEPS),
        Setting("fuse-expert-kv", fuse_expert_kv=True),
        Setting("fewer-steps", fewer_steps=True),
    ]


def parse_variants(text: str) -> list[Setting]:
    """``default`` (the reduced precisions on every CPU backend and every optimization), ``all`` (also each backend at
    fp32) or a comma list of setting names; the reference always runs, first."""
    catalog = {setting.name: setting for setting in all_settings()}
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(catalog.values())
    if names == ["default"]:
        return [s for s in catalog.values() if s.name == REFERENCE or s.backend == "torch" or s.precision in REDUCED]
    if not names:
        raise InputError(f"no variant given: default, all, or a comma list of {', '.join(catalog)}")
    for name in names:
        if name not in catalog:
            raise unknown_name("closed-loop variant", name, [*catalog, "default", "all"])
    return [catalog[REFERENCE], *(catalog[name] for name in dict.fromkeys(names) if name != REFERENCE)]


def task_set_of(folder: Path) -> TaskSet:
    """The tasks, instructions, camera and frame size the checkpoint was trained with (its ``training.json``)."""
    path = folder / "training.json"
    try:
        record = json.loads(path.read_text())
        return TaskSet(dict(record["tasks"]), str(record["camera"]), int(record["image_size"]))
    except FileNotFoundError:
        raise InputError(
            f"checkpoint {folder}: no training.json (not a policy vlabench trained on Meta-World)"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"checkpoint {folder}: training.json does not name tasks, camera and image_size: {exc}"
        ) from None


@dataclass
class Prepared:
    variant: PolicyVariant
    fields: dict[str, Any]  # VariantSuccess's description of it


def _schedule(setting: Setting, plan: RunPlan, seed: int) -> DPCacheSchedule | None:
    if setting.dp_cache == "default":
        return next(v.dp_cache for v in default_variants(plan.workload.steps) if v.dp_cache and not v.stale_steps)
    if setting.dp_cache == "calibrated":
        target = plan.device.torch_device
        return calibrate_dp_cache(
            plan.spec, plan.workload, CALIBRATION["observations"], CALIBRATION["budget"], seed, target
        )
    return None


def prepare(setting: Setting, model: str, checkpoint: Path, device: str, seed: int) -> Prepared:
    """Plan and prepare one setting as ``vlabench run`` would; UnavailableError/InputError when it cannot run."""
    spec = load_model_spec(model)
    steps = max(1, spec.action.steps // 2) if setting.fewer_steps else None
    plan = plan_target(
        model,
        "closed-loop task success",
        device=device,
        backend=setting.backend,
        precision=setting.precision,
        checkpoint=checkpoint,
        seed=seed,
        steps=steps,
    )
    backend = plan.backend
    if setting.fuse_expert_kv:
        refusal = fuse_refusal(plan)
        if refusal:
            raise UnavailableError(refusal)
        backend = get_backend(backend.name, backend_options(plan.config.model_copy(update={"fuse_expert_kv": True})))
    target = plan.device.torch_device
    schedule = _schedule(setting, plan, seed)
    policy = prepare_contender(plan, backend=backend).policy
    factory = model_loop(plan.spec, plan.workload, target)
    variant = PolicyVariant(
        name=setting.name,
        policy=policy,
        loop=lambda: factory(schedule, 1),
        stale_steps=setting.stale_steps,
        dtype=Precision.dtype(plan.precision),
        concurrent=setting.stale_steps > 0,
    )
    executed = policy.executed_on()
    details = policy.details()
    scheme = details.get("quantization") if isinstance(details.get("quantization"), str) else None
    fields = {
        "backend": plan.backend.name,
        "precision": plan.precision,
        "optimization": optimization_label(schedule, setting.fuse_expert_kv, setting.stale_steps),
        "dp_cache": schedule,
        "stale_steps": setting.stale_steps,
        "fuse_expert_kv": setting.fuse_expert_kv,
        "steps": plan.workload.steps,
        "executed_on": f"{executed.engine} ({executed.device}, {executed.source})",
        "scheme": scheme,
    }
    return Prepared(variant, fields)


def _prepare_all(
    request: TaskSuccessRequest, folder: Path, seed: int, progress: Callable[[str], None] | None
) -> tuple[list[Prepared], list[SkippedVariant]]:
    """Every requested setting prepared; the ones that cannot run here skipped with the reason (not the reference)."""
    prepared, skipped = [], []
    for setting in request.settings:
        try:
            prepared.append(prepare(setting, request.model, folder, request.device, seed))
        except (UnavailableError, InputError) as exc:
            if setting.name == REFERENCE:
                raise
            skipped.append(SkippedVariant(variant=f"{setting.name} (task success)", reason=str(exc)))
            continue
        if progress:
            progress(f"prepared {setting.name}")
    return prepared, skipped


def _rows(record: VariantEpisodes, fields: dict[str, Any]) -> VariantSuccess:
    tasks = [task_outcomes(task, record.success[task], record.steps[task]) for task in record.success]
    cycle = summarize(record.cycle_ms) if record.cycle_ms else None
    return variant_success(record.name, tasks, cycle_ms=cycle, **fields)


@dataclass(frozen=True)
class TaskSuccessRequest:
    """What ``vlabench fidelity`` asks of a trained model's closed loop."""

    model: str
    settings: tuple[Setting, ...]
    checkpoint: Path | None = None  # None: the model's trained checkpoint
    tasks: tuple[str, ...] | None = None  # None: every task it was trained on
    episodes: int = 50  # per task and variant
    seed: int = 0
    actions_per_chunk: int | None = None  # None: the model's
    max_steps: int = 200
    device: str = "auto"
    threads: int = 1  # intra-op threads of every backend: one control loop on a shared host


def run_task_success(
    request: TaskSuccessRequest,
    progress: Callable[[str], None] | None = None,
    extra: list[tuple[PolicyVariant, dict[str, Any]]] = (),
) -> tuple[TaskSuccessReport, list[SkippedVariant]]:
    """Prepare every setting, play the episodes and compare each variant with the reference. ``extra``: variants
    prepared by the caller (e.g. a test's deliberately broken policy), each with its ``VariantSuccess`` fields."""
    model, checkpoint, device = request.model, request.checkpoint, request.device
    spec = load_model_spec(model)
    folder = checkpoint or trained_checkpoint(spec)
    if folder is None:
        raise InputError(f"{model} has no trained checkpoint: task success needs one (--checkpoint FOLDER)")
    folder = folder if folder.is_dir() else folder.parent
    task_set = task_set_of(folder).choose(list(request.tasks) if request.tasks is not None else None)
    chunk_actions = request.actions_per_chunk or spec.action.actions_per_chunk
    if not 0 < chunk_actions <= spec.action.chunk:
        raise InputError(f"--actions-per-chunk must be within 1..{spec.action.chunk} ({model}'s chunk)")
    if request.episodes < 1 or request.max_steps < 1:
        raise InputError("--episodes and --max-steps must be at least 1")
    plan = EpisodePlan(task_set, request.episodes, request.seed, chunk_actions, request.max_steps)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(request.threads)  # before preparing: ONNX Runtime and OpenVINO sessions read it
    try:
        prepared, skipped = _prepare_all(request, folder, plan.seed, progress)
        prepared += [Prepared(variant, fields) for variant, fields in extra]
        reference_plan = plan_target(
            model, "closed-loop task success", device=device, checkpoint=folder, seed=plan.seed
        )
        workload = reference_plan.workload
        pipeline = InputPipeline(
            reference_plan.spec,
            workload,
            plan.seed,
            torch.float32,
            reference_plan.device.torch_device,
            read_normalization(folder, workload.state_dim, workload.action_dim),
            read_tokenizer(folder, workload.language_tokens),
        )
        ceiling, floor = expert_episodes(plan), random_episodes(plan)  # first: an interrupt after them keeps work
        records, interrupted = run_episodes([p.variant for p in prepared], pipeline, plan, progress)
    finally:
        torch.set_num_threads(previous_threads)
    played = {task: len(outcomes) for task, outcomes in records[0].success.items() if outcomes}
    if not played:
        raise KeyboardInterrupt  # interrupted before every variant finished one episode: nothing to keep
    rows = [_rows(record, p.fields) for record, p in zip(records, prepared, strict=True)]
    reference = rows[0]
    baseline = {"backend": None, "precision": None, "optimization": "none", "steps": None}
    expert, floor = _rows(ceiling.first(played), baseline), _rows(floor.first(played), baseline)
    weights = checkpoint_file(folder)
    report = TaskSuccessReport(
        benchmark=benchmark_name(),
        episodes_from=f"MT1 benchmark seed {plan.benchmark_seed}: episode e plays scene e mod 50 (set_task)",
        device=reference_plan.device.profile.name,
        checkpoint=reference_plan.spec.checkpoint or str(weights),
        checkpoint_sha256=hashlib.sha256(weights.read_bytes()).hexdigest(),
        tasks={task: plan.task_set.instructions[task] for task in played},
        interrupted=interrupted,
        camera=plan.task_set.camera,
        image_size=plan.task_set.image_size,
        max_steps=plan.max_steps,
        chunk=workload.chunk,
        actions_per_chunk=plan.actions_per_chunk,
        seed=plan.seed,
        threads=request.threads,
        reference=REFERENCE,
        expert=compared(expert, reference),
        random=compared(floor, reference),
        variants=[compared(row, reference) for row in rows],
    )
    return report, skipped


def benchmark_name() -> str:
    from importlib.metadata import version

    return f"Meta-World v3 (metaworld {version('metaworld')}, MuJoCo {version('mujoco')})"
