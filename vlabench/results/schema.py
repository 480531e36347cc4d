"""The versioned result schema and its atomic, one-file-per-run store."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from vlabench.analysis.cet import CostReport
from vlabench.analysis.roofline import RooflineReport
from vlabench.atomic import atomic_write_text
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.hardware.devices import load_device_profile
from vlabench.hardware.targets import ENGINE_OF_TORCH_TYPE, ExecutionTarget, mismatch, profile_engine
from vlabench.measure.correctness import Correctness
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.stats import Stats
from vlabench.models.workload import Workload
from vlabench.optimizations.fidelity import ActionError
from vlabench.results.header import LEGACY_RUN_SCHEMA, RUN_KIND, ArtifactHeader
from vlabench.results.provenance import Provenance
from vlabench.results.store import read_json, validate_artifact
from vlabench.telemetry.system_state import SystemState

SCHEMA_VERSION = "1.1"
"""1.1: the artifact header (``kind: "run"`` added). 1.0 files, which have no kind, still load."""
READABLE_SCHEMA_VERSIONS = (LEGACY_RUN_SCHEMA, SCHEMA_VERSION)
GATE_FAILED = "failed the correctness gate"


class Stored(BaseModel):
    """A block of the result file: non-finite floats are written as "NaN"/"Infinity" strings and read back as
    floats (pydantic's default writes null, which loses the value and no longer loads)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")


class ModelInfo(Stored):
    name: str
    family: str
    spec_hash: str
    params: int
    tokens_per_camera: int
    checkpoint: str | None = Field(default=None, description="lerobot weights loaded (path:size:mtime); None: seeded")


class DeviceInfo(Stored):
    requested: str
    profile: str
    display_name: str
    kind: str
    torch_device: str
    note: str
    memory_gb: float | None = Field(description="device memory from the profile, or host RAM for CPUs without one")
    price_usd: float | None
    engine: str | None = Field(default=None, description="the engine the profile stands for (None before 1.1)")

    def expected_engine(self, device_target: str | None) -> str | None:
        """The engine this result must have executed on: recorded, or derived from a packaged profile."""
        if self.engine is not None:
            return self.engine
        try:
            return profile_engine(load_device_profile(self.profile), device_target)
        except InputError:
            return None  # a profile built from detection on the host that ran it: nothing to check against

    def recorded_target(self) -> ExecutionTarget:
        """Where a result written before execution targets were read back ran: its torch device."""
        kind = self.torch_device.split(":")[0]
        return ExecutionTarget(
            engine=ENGINE_OF_TORCH_TYPE.get(kind, kind), device=self.torch_device, source="torch device recorded"
        )


class Timing(Stored):
    """Wall-clock latency per phase, in ms. ``e2e_unsynced`` has no synchronization inside the inference."""

    source: Literal["measured"] = "measured"
    phases: dict[str, Stats]
    denoise_steps: list[Stats] = Field(description="per denoising step index")
    first_inference_ms: float
    warmup_iterations: int
    iterations: int
    timed_duration_s: float
    samples_ms: dict[str, list[float]]


class ControlVerdict(Stored):
    """Whether the policy sustains ``control_hz`` actions per second, executing ``actions_per_chunk`` per chunk."""

    control_hz: float
    actions_per_chunk: int
    inference_hz_p50: float
    inference_hz_p99: float
    action_hz_p50: float
    action_hz_p99: float
    judged_on: Literal["p99"] = "p99"
    meets_target: bool


class EnergyResult(Stored):
    """Energy of whole inferences over one window, measured in a pass of its own after an idle window."""

    label: Literal["measured", "estimated"]
    method: str
    scope: str
    sampling_period_s: float | None
    meter: dict[str, Any] = Field(description="sensor paths, rails or the assumptions behind an estimate")
    idle_window_s: float
    idle_w: float
    window_s: float
    window_inferences: int
    average_w: float
    joules_per_inference: float
    joules_per_action: float
    dynamic_joules_per_inference: float = Field(description="above idle power: (average - idle) W × time")
    notes: list[str]


class MemoryInfo(Stored):
    params: int
    weights_bytes: int
    estimated_total_bytes: int
    peak_rss_bytes: int
    cuda_max_allocated_bytes: int | None


class Optimization(Stored):
    """Action-expert optimizations of the run. DP-Cache is lossy: its open-loop error against the exact path (fp32
    torch, first input) is stored; the correctness gate then judges the backend against the same schedule."""

    dp_cache: DPCacheSchedule | None
    fuse_expert_kv: bool
    dp_cache_error: ActionError | None


class RunResult(ArtifactHeader):
    kind: Literal["run"] = RUN_KIND
    schema_version: str = SCHEMA_VERSION
    run_id: str
    started_utc: AwareDatetime
    finished_utc: AwareDatetime
    model: ModelInfo
    device: DeviceInfo
    backend: str
    precision: str
    provenance: Provenance
    config_hash: str
    config: RunConfig
    workload: Workload
    backend_details: dict[str, Any]
    timing: Timing
    control: ControlVerdict
    correctness: Correctness | None = Field(default=None, description="None for the fp32 eager torch reference")
    energy: EnergyResult | None
    cost: CostReport | None
    memory: MemoryInfo
    warnings: list[str]
    system_state: SystemState
    optimization: Optimization | None = None
    execution: ExecutionTarget | None = Field(
        default=None, description="where the run executed, read back from the runtime (None before 1.1)"
    )
    roofline: RooflineReport | None = Field(
        default=None, description="analytic FLOPs/bytes per phase against the ceilings, achieved from measured p50"
    )

    READABLE_SCHEMAS: ClassVar[tuple[str, ...] | None] = READABLE_SCHEMA_VERSIONS

    @property
    def valid(self) -> bool:
        """False when the run failed the correctness gate (or its action error is not recorded, or not finite);
        invalid runs are shown flagged and never ranked."""
        return self.invalid_reason is None

    @property
    def invalid_reason(self) -> str | None:
        """Why the run is invalid, for every reader (rank, compare, validate, the site); None when it is valid."""
        expected = self.device.expected_engine(self.config.device_target)
        problem = expected and mismatch(expected, self.execution or self.device.recorded_target())
        if problem:
            return f"mislabelled: {problem}"
        check = self.correctness
        if check is None:
            return None
        error, tolerance = check.relative_error, check.tolerance
        if error is None:
            return f"{GATE_FAILED}: action error not recorded"
        if not math.isfinite(error):
            return f"{GATE_FAILED}: relative action error {error:.2e}"
        if check.passed:
            return None
        if error > tolerance.max_relative_error:
            return f"{GATE_FAILED}: relative action error {error:.2e} > {tolerance.max_relative_error:g}"
        cosine = check.displacement_cosine
        if cosine is None or not cosine >= tolerance.min_cosine:
            shown = "not recorded" if cosine is None else f"{cosine:.6f}"
            return f"{GATE_FAILED}: displacement cosine {shown} < {tolerance.min_cosine:g}"
        return f"{GATE_FAILED} (non-finite actions)"

    def stem(self) -> str:
        parts = (self.model.name, self.device.profile, self.backend, self.precision, self.run_id[:8])
        return "_".join((self.stamp(self.started_utc), *parts))


def write_result(result: RunResult, out_dir: Path) -> Path:
    """Write one result file atomically (see ``atomic_write_text``)."""
    return atomic_write_text(out_dir / result.file_name(), result.model_dump_json(indent=2))


def result_from_document(path: Path, data: Any) -> RunResult:
    """A parsed document as a run result: kind ``run`` with a readable schema (a schema-1.0 file, which has no kind,
    is a run result); anything else raises InputError naming the file and the problem."""
    problem = RunResult.document_problem(data)
    if problem is not None:
        raise InputError(f"{path}: {problem}")
    return validate_artifact(path, data, RunResult, "result")


def load_result(path: Path) -> RunResult:
    """Read and validate a result file; malformed or foreign files raise InputError naming the problem."""
    return result_from_document(path, read_json(path))
