"""``vlabench project``: projected rows (latency per phase, rate, estimated energy, cost, memory fit) for any
(model, device, stack, precision) the profiles allow, each with the grouped-CV band of its stack on its device
class, that band's measured coverage, and an ``uncalibrated`` mark for a stack with fewer than three published
entries."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from vlabench.analysis.projected_rows import ProjectedRow
from vlabench.analysis.projection import PRECISIONS, device_stacks, project_all
from vlabench.analysis.projection_bands import Band, BandTable
from vlabench.analysis.projection_fit import FittedParameters
from vlabench.analysis.projection_inputs import power_mode
from vlabench.analysis.projection_score import fitted_model
from vlabench.analysis.projection_stacks import get_stack, stacks
from vlabench.atomic import atomic_write_text
from vlabench.errors import InputError, unknown_name
from vlabench.hardware.devices import load_device_profile
from vlabench.models.specs import load_model_spec
from vlabench.vocab import Precision

METHOD = (
    "per phase: sum over operators of max(FLOPs/peak, bytes/bandwidth) on the datasheet ceiling / the stack's "
    "achieved share of peak + kernels (traced graph, the stack's counting scheme) x (the stack's cost per kernel x "
    "the device's host factor + a device-side work-equivalent per kernel / peak); parameters fitted on "
    "profiles/reported/latencies.yaml; band: split-conformal quantile of leave-one-source-out errors of the stack on "
    "the device class"
)


@dataclass(frozen=True)
class ProjectRequest:
    models: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    stacks: list[str] = field(default_factory=list)
    precisions: list[str] = field(default_factory=list)
    every: bool = False
    control_hz: float = 10.0
    cameras: int | None = None
    steps: int | None = None
    power_mode: str | None = None


class ProjectOutcome(BaseModel):
    label: Literal["projected"] = "projected"
    method: str
    ranked: bool = False
    error_bands: dict[str, Band] = Field(description="per stack, its band on no particular device class")
    uncalibrated: list[str] = Field(description="stacks with fewer than three published entries")
    bands: BandTable = Field(description="every band with its basis, count and held-out coverage")
    parameters: FittedParameters
    rows: list[ProjectedRow]


def _check_names(request: ProjectRequest) -> None:
    for model in request.models:
        load_model_spec(model)
    for device in request.devices:
        load_device_profile(device)
    for stack in request.stacks:
        get_stack(stack)
    for precision in request.precisions:
        if precision not in PRECISIONS:
            raise unknown_name("precision", precision, PRECISIONS)


def run_project(request: ProjectRequest) -> ProjectOutcome:
    """``--all``: every allowed combination narrowed by the given names; else one model on one device."""
    _check_names(request)
    if not request.every and (len(request.models) != 1 or len(request.devices) != 1):
        raise InputError("give one --model and one --device, or --all (optionally narrowed by them)")
    precisions = request.precisions
    if not request.every and not precisions:
        profile = load_device_profile(request.devices[0])
        precisions = [Precision.default(profile.torch_device == "cpu", profile.peak_tflops)]
    if not request.every:
        profile = load_device_profile(request.devices[0])
        allowed = device_stacks(profile)
        for stack in request.stacks:
            if stack not in allowed:
                raise InputError(f"{profile.name} does not run the {stack} stack; its stacks: {', '.join(allowed)}")
    if request.power_mode is not None:
        if not request.devices:
            raise InputError("--power-mode needs --device: power modes are a device's own")
        for device in request.devices:
            power_mode(load_device_profile(device), request.power_mode)
    rows = project_all(
        request.models or None,
        request.devices or None,
        request.stacks or None,
        precisions or None,
        request.control_hz,
        request.cameras,
        request.steps,
        request.power_mode,
    )
    if not rows:
        raise InputError("no (model, device, stack, precision) the profiles allow matches these names")
    model = fitted_model()
    bands = {name: model.bands.band(name) for name in stacks()}
    return ProjectOutcome(
        method=METHOD,
        error_bands=bands,
        uncalibrated=[name for name, band in bands.items() if band.uncalibrated],
        bands=model.bands,
        parameters=model.parameters,
        rows=rows,
    )


def write_outcome(outcome: ProjectOutcome, path: Path) -> Path:
    """The outcome as JSON, written atomically."""
    return atomic_write_text(path, outcome.model_dump_json(indent=2) + "\n")
