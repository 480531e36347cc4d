"""``vlabench calibrate dp-cache``: the DP-Cache schedule with the most skipped steps within an action-error budget,
saved as a file for ``--dp-cache``.

The model, weights (``--checkpoint``), device and backend are planned exactly as ``vlabench run`` plans them; the
exact path is the fp32 eager torch replica on that device, and the schedules' actions come from the same replica
(``--backend torch`` at fp32, the default) or from the chosen backend at the chosen precision (``Candidate``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import torch
from pydantic import ValidationError

from vlabench.atomic import writable_folder_problem
from vlabench.backends import get_backend
from vlabench.commands.run import RunPlan, backend_options, check_optimizations, plan_run, prepare_contender
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.hardware.detection import detect_host
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.models.specs import load_model_spec
from vlabench.optimizations.calibration import calibrate_dp_cache
from vlabench.optimizations.candidates import Candidate, require_denoising_loop
from vlabench.results.calibration import DPCacheCalibration, write_calibration
from vlabench.results.provenance import collect_provenance
from vlabench.vocab import Precision


def plan_target(
    model: str,
    what: str,
    device: str = "auto",
    backend: str = "torch",
    precision: str | None = None,
    checkpoint: Path | None = None,
    seed: int = 0,
    steps: int | None = None,
    cameras: int | None = None,
) -> RunPlan:
    """The model (with its checkpoint), device, backend and workload, resolved and checked as ``vlabench run`` does
    them (precision fp32 unless given); refuses action heads without a denoising loop before anything is built."""
    require_denoising_loop(load_model_spec(model), what)
    if backend == "all" or "," in backend:
        raise InputError(f"{what}: give one backend, not '{backend}'")
    try:
        config = RunConfig(
            model=model,
            device=device,
            backend=backend,
            precision=precision or Precision.REFERENCE,
            checkpoint=checkpoint,
            seed=seed,
            steps=steps,
            cameras=cameras,
            energy_meter="none",
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        raise InputError(f"--{str(error['loc'][0]).replace('_', '-')}: {error['msg']}") from None
    plan = plan_run(config)
    action, steps = plan.spec.action, plan.workload.steps
    if plan.workload.action_loop in ("ddpm", "ddim") and steps > action.train_timesteps:
        raise InputError(f"{model} was trained with {action.train_timesteps} timesteps: --steps must not exceed it")
    if plan.workload.action_loop == "ddpm" and steps != action.train_timesteps:
        raise InputError(f"DDPM runs every training timestep: --steps must be {action.train_timesteps} for {model}")
    return plan


def fuse_refusal(plan: RunPlan) -> str | None:
    """Why ``--fuse-expert-kv`` does not apply to this model and backend (``vlabench run``'s own check), or None."""
    try:
        check_optimizations(plan.config.model_copy(update={"fuse_expert_kv": True}), plan.backend, None, plan.spec)
    except InputError as exc:
        return str(exc)
    return None


def candidate_for(plan: RunPlan) -> Candidate | None:
    """None for the exact path itself (torch at fp32); else the backend's policy at the plan's precision, prepared as
    every command prepares it (``prepare_contender``)."""
    if plan.backend.is_reference and plan.precision == Precision.REFERENCE:
        return None

    def fused():
        options = backend_options(plan.config.model_copy(update={"fuse_expert_kv": True}))
        return prepare_contender(plan, backend=get_backend(plan.backend.name, options)).policy

    return Candidate(
        description=f"{plan.backend.name} {plan.precision} on {plan.device.torch_device}",
        policy=prepare_contender(plan).policy,
        dtype=Precision.dtype(plan.precision),
        fused=None if fuse_refusal(plan) else fused,
    )


def plan_calibration(observations: int, budget: float, model: str, **target) -> RunPlan:
    """The plan to calibrate on; bad settings fail here, before the calibration starts."""
    if observations < 1 or budget <= 0:
        raise InputError("--observations must be ≥ 1 and --budget positive")
    return plan_target(model, "DP-Cache", **target)


def calibration_path(out: Path | None, model: str) -> Path:
    """Where the artifact goes: ``--out`` as a file, or ``<model>.dp-cache.json`` inside ``--out`` when it is a folder
    (default ``results/``); refused before the calibration when nothing can be written there."""
    path = out if out is not None and not out.is_dir() else (out or Path("results")) / f"{model}.dp-cache.json"
    problem = writable_folder_problem(path.parent)
    if problem:
        raise InputError(f"--out {out or path.parent}: cannot write the schedule there: {problem}")
    return path


def run_calibration(plan: RunPlan, observations: int, budget: float, out_file: Path) -> tuple[DPCacheSchedule, Path]:
    """Calibrate on ``observations`` seeded observations and write the calibration artifact."""
    started = datetime.now(timezone.utc)
    target = plan.device.torch_device
    schedule = calibrate_dp_cache(
        plan.spec, plan.workload, observations, budget, plan.config.seed, target, candidate_for(plan)
    )
    artifact = DPCacheCalibration(
        started_utc=started,
        finished_utc=datetime.now(timezone.utc),
        model=plan.spec.name,
        device=plan.device.profile.name,
        backend=plan.backend.name,
        precision=plan.precision,
        schedule=schedule,
        provenance=collect_provenance(detect_host(), torch.get_num_threads()),
    )
    return schedule, write_calibration(artifact, out_file)
