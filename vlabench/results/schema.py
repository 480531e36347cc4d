"""The versioned result schema and its atomic, one-file-per-run store."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

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
from vlabench.results.control import ControlVerdict, legacy_control
from vlabench.results.header import LEGACY_RUN_SCHEMA, RUN_KIND, ArtifactHeader, Stored
from vlabench.results.provenance import Provenance
from vlabench.results.relation_terms import (
    MAX_LATENCY_MS,  # noqa: F401  (the schema's bound, read by its tests)
    MIN_LATENCY_MS,
    Problems,
    is_latency,
    latency_message,
)
from vlabench.results.relations import relation_problems
from vlabench.results.served_relations import served_stats
from vlabench.results.serving import RobotServing, ServingResult
from vlabench.results.stats_relations import latency_problems
from vlabench.results.store import read_json, validate_artifact
from vlabench.results.sustained import ColdStart, Sustained
from vlabench.telemetry.system_state import SystemState

SCHEMA_VERSION = "1.6"
"""1.1: the artifact header (``kind: "run"`` added). 1.0 files, which have no kind, still load. 1.2: the control
verdict under an execution model (``ControlVerdict``), usable device memory; older control blocks are re-gated on
reading (``legacy_control``). 1.3: each percentile's 95% confidence interval (``Stats.intervals``); the gate judges
the upper end of p99's (``ControlVerdict.judged_on``); 1.2 files, without intervals, keep their point p99. 1.4: the
cold start (``ColdStart``), latency per window and the sensors' trace (``Sustained``), the input pipeline's phase.
1.5: robots served by one policy instance (``ServingResult``), cost and energy shared by the robots a device serves
(``robots_per_device``). 1.6: a result's ``status`` (partial: interrupted after timing began, with the reason);
the served window's batches, busy share, energy and capacity search, the link (``results/serving.py``)."""
READABLE_SCHEMA_VERSIONS = (LEGACY_RUN_SCHEMA, "1.1", "1.2", "1.3", "1.4", "1.5", SCHEMA_VERSION)
GATE_FAILED = "failed the correctness gate"


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
    usable_memory_gb: float | None = Field(
        default=None, description="memory a model may use (the profile's usable figure); None: memory_gb (before 1.2)"
    )
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

    def usable_gb(self) -> float | None:
        """Memory a model may use: recorded, else the packaged profile's usable figure when the file recorded that
        profile's nameplate, else the recorded memory."""
        if self.usable_memory_gb is not None:
            return self.usable_memory_gb
        try:
            profile = load_device_profile(self.profile)
        except InputError:
            return self.memory_gb
        nameplate = profile.memory_gb.value if profile.memory_gb else None
        return profile.usable_gb if nameplate is not None and nameplate == self.memory_gb else self.memory_gb

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
    """One run's result, assembled whole by ``results.assemble.assemble_result`` and frozen: a reader or writer that
    wants another one makes a copy (``model_copy(update=...)``)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["run"] = RUN_KIND
    schema_version: str = SCHEMA_VERSION
    run_id: str
    status: Literal["complete", "partial"] = Field(
        default="complete", description="partial: interrupted after timing began; what was measured is kept"
    )
    partial_reason: str | None = Field(default=None, description="why a partial result stopped short")
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
    cold_start: ColdStart | None = Field(default=None, description="preparation stage by stage (None before 1.4)")
    sustained: Sustained | None = Field(
        default=None, description="latency per window and the sensors through the pass (None before 1.4)"
    )
    serving: ServingResult | None = Field(
        default=None, description="--robots: the robots served by this policy instance (None: not served)"
    )

    READABLE_SCHEMAS: ClassVar[tuple[str, ...] | None] = READABLE_SCHEMA_VERSIONS

    @model_validator(mode="before")
    @classmethod
    def _no_pipeline_before_1_4(cls, data: Any) -> Any:
        """Files older than 1.4 timed no input pipeline: their config says so."""
        config = data.get("config") if isinstance(data, dict) else None
        if isinstance(config, dict) and "preprocess" not in config:
            return {**data, "config": {**config, "preprocess": False}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _actions_per_request_before_1_6(cls, data: Any) -> Any:
        """Files older than 1.6 did not record the actions each served reply delivers: a per-step robot executes
        one, a chunked one its control block's actions per chunk."""
        if not isinstance(data, dict):
            return data
        served, control = data.get("serving"), data.get("control")
        if not isinstance(served, dict) or "actions_per_request" in served or not isinstance(control, dict):
            return data
        chunked = served.get("execution") in ("sync", "async") and isinstance(control.get("actions_per_chunk"), int)
        actions = control["actions_per_chunk"] if chunked else 1
        return {**data, "serving": {**served, "actions_per_request": actions}}

    @model_validator(mode="before")
    @classmethod
    def _regate_older_files(cls, data: Any) -> Any:
        """Files older than 1.2: the control block re-gated (``legacy_control``), the config's execution set."""
        if not isinstance(data, dict) or not isinstance(data.get("control"), dict) or "execution" in data["control"]:
            return data
        config = data.get("config")
        explicit = config.get("actions_per_chunk") if isinstance(config, dict) else None
        control = legacy_control(data["control"], explicit)
        data = {**data, "control": control}
        if isinstance(config, dict) and "execution" not in config and isinstance(control, dict):
            data["config"] = {**config, "execution": "per-step" if explicit is None else "async"}
        return data

    @property
    def robot_latency(self) -> Stats:
        """The latency a robot saw: a served run's, queueing included (what its gate and ranking judge); else the
        timed pass's end to end."""
        return self.serving.latency if self.serving else self.timing.phases["e2e"]

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

    def physical_problems(self) -> Problems:
        """Every measured figure that cannot be: latencies that are not finite and positive (end-to-end: ≥ 1 µs),
        percentiles out of order, no ``e2e`` phase, no timed iteration, negative or non-finite energy, power, price
        or cost, sizes below zero, a run that finished before it started; when every figure is in range, the
        relations between them (``results.relations``: parts within the whole, energy = power × time, memory within
        the device, …). A NaN action error is no such problem: it is a measurement of broken actions (see
        ``invalid_reason``). Readers skip a result with any; ``validate`` lists them all."""
        found: Problems = []
        timing = self.timing
        if "e2e" not in timing.phases:
            found.append(("timing.phases.e2e", "missing: every run times the end-to-end inference"))
        named = [(f"timing.phases.{name}", stats, name) for name, stats in timing.phases.items()]
        steps = [(f"timing.denoise_steps.{i}", stats, "denoise_step") for i, stats in enumerate(timing.denoise_steps)]
        for field, stats, phase in named + steps:
            found += latency_problems(field, stats, MIN_LATENCY_MS if phase.startswith("e2e") else 0.0)
        for name, samples in timing.samples_ms.items():
            floor = MIN_LATENCY_MS if name.startswith("e2e") else 0.0
            bad = next((i for i, value in enumerate(samples) if not is_latency(value, floor)), None)
            if bad is not None:
                found.append((f"timing.samples_ms.{name}.{bad}", latency_message(samples[bad], floor)))
        if not is_latency(timing.first_inference_ms, 0.0):
            found.append(("timing.first_inference_ms", latency_message(timing.first_inference_ms, 0.0)))
        if timing.iterations < 1:
            found.append(("timing.iterations", f"{timing.iterations}: a result has at least one timed inference"))
        energy, cost = self.energy, self.cost
        lows = {"dynamic_joules_per_inference": -math.inf}  # below idle power: noise may make it negative
        checks: list[tuple[str, BaseModel | None, tuple[str, ...], bool]] = [
            # block, its fields that must be finite and ≥ 0 (or > 0 when the flag is set)
            ("timing", timing, ("warmup_iterations", "timed_duration_s"), False),
            ("control", self.control, ("inference_hz_p50", "inference_hz_p99", "reaction_ms"), False),
            ("control", self.control, ("delivered_action_hz_p50", "delivered_action_hz_p99"), False),
            ("control", self.control, ("control_hz", "actions_per_chunk"), True),
            ("model", self.model, ("params", "tokens_per_camera"), False),
            ("device", self.device, ("price_usd",), False),
            ("device", self.device, ("memory_gb", "usable_memory_gb"), True),
            ("memory", self.memory, tuple(MemoryInfo.model_fields), False),
            ("energy", energy, tuple(EnergyResult.model_fields), False),
            ("cost", cost, tuple(CostReport.model_fields), False),
            ("cost.assumptions", cost and cost.assumptions, ("electricity_usd_per_kwh",), False),
            ("cost.assumptions", cost and cost.assumptions, ("lifetime_years", "duty_cycle"), True),
        ]
        served = self.serving
        if served is not None:  # robots' latencies are read by the control relation: checked before any relation
            for name, stats, zero in served_stats(served):
                found += latency_problems(f"serving.{name}", stats, 0.0, zero)
            checks.append(("serving", served, tuple(ServingResult.model_fields), False))
            checks += [
                (f"serving.per_robot.{i}", row, tuple(RobotServing.model_fields), False)
                for i, row in enumerate(served.per_robot)
            ]
        for name, block, fields, strict in checks:
            if block is not None:
                found += figure_problems(name, block, fields, strict, lows)
        if self.finished_utc < self.started_utc:
            found.append(("finished_utc", f"{self.finished_utc.isoformat()} is before started_utc"))
        return found or relation_problems(self)

    def stem(self) -> str:
        parts = (self.model.name, self.device.profile, self.backend, self.precision, self.run_id[:8])
        return "_".join((self.stamp(self.started_utc), *parts))


def figure_problems(
    name: str, block: BaseModel, fields: tuple[str, ...], strict: bool, lows: dict[str, float]
) -> Problems:
    """The numeric ``fields`` of a block that are not finite, or below their low (``lows``, else 0), or at it when
    ``strict``. None (not recorded), text and nested blocks are passed over."""
    found = []
    for field in fields:
        value, low = getattr(block, field), lows.get(field, 0.0)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if not math.isfinite(value):
            found.append((f"{name}.{field}", f"{value:g}: not a finite number"))
        elif value < low or (strict and value == low):
            found.append((f"{name}.{field}", f"{value:g}: must be {'>' if strict else '≥'} {low:g}"))
    return found


def write_result(result: RunResult, out_dir: Path) -> Path:
    """Write one result file atomically (see ``atomic_write_text``)."""
    return atomic_write_text(out_dir / result.file_name(), result.model_dump_json(indent=2))


def result_from_document(path: Path, data: Any) -> RunResult:
    """A parsed document as a run result: kind ``run`` with a readable schema (a schema-1.0 file, which has no kind,
    is a run result); anything else raises InputError naming the file and the problem."""
    problem = RunResult.document_problem(data)
    if problem is not None:
        raise InputError(f"{path}: {problem}")
    result = validate_artifact(path, data, RunResult, "result")
    impossible = result.physical_problems()
    if impossible:
        field, message = impossible[0]
        rules = dict.fromkeys(other.split(":", 1)[0] for _, other in impossible[1:])
        more = f" (and {len(impossible) - 1} more: {'; '.join(rules)}; vlabench validate lists them)" if rules else ""
        raise InputError(f"{path}: impossible measurement: {field} {message}{more}")
    return result


def load_result(path: Path) -> RunResult:
    """Read and validate a result file (a link named here is followed); malformed, foreign or physically impossible
    files raise InputError naming the problem."""
    return result_from_document(path, read_json(path))
