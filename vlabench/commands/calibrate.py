"""``vlabench calibrate dp-cache``: the DP-Cache schedule with the most skipped steps within an action-error budget,
calibrated on the fp32 eager torch replica and saved as a file for ``--dp-cache``."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import torch

from vlabench.errors import InputError
from vlabench.hardware.detection import detect_host
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.models.workload import Workload
from vlabench.optimizations.calibration import calibrate_dp_cache
from vlabench.results.calibration import DPCacheCalibration, write_calibration
from vlabench.results.provenance import collect_provenance


def plan_calibration(
    model: str, observations: int, budget: float, steps: int | None, cameras: int | None
) -> tuple[ModelSpec, Workload]:
    """The model and workload to calibrate on; bad settings fail here, before the calibration starts."""
    if observations < 1 or budget <= 0:
        raise InputError("--observations must be ≥ 1 and --budget positive")
    spec = load_model_spec(model)
    return spec, Workload.from_spec(spec, cameras, steps)


def run_calibration(
    spec: ModelSpec, workload: Workload, observations: int, budget: float, seed: int, out_file: Path | None
) -> tuple[DPCacheSchedule, Path]:
    """Calibrate on ``observations`` seeded observations (on the CPU) and write the calibration artifact."""
    started = datetime.now(timezone.utc)
    schedule = calibrate_dp_cache(spec, workload, observations, budget, seed, torch.device("cpu"))
    artifact = DPCacheCalibration(
        started_utc=started,
        finished_utc=datetime.now(timezone.utc),
        model=spec.name,
        schedule=schedule,
        provenance=collect_provenance(detect_host(), torch.get_num_threads()),
    )
    return schedule, write_calibration(artifact, out_file)
