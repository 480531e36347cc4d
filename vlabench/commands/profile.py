"""``vlabench profile``: phase spans and utilization counters on one clock, the runtime's own operator profile,
and a per-phase summary with the roofline verdict.

Passes, in order, each recorded in the result: ``ceilings`` (GEMM and bandwidth micro-benchmarks), ``trace``
(phase spans + counter samplers, nothing else: its durations feed the summary) and, for ONNX Runtime / OpenVINO or
with ``--kernels``, ``operators`` (the runtime's per-node profiler and/or the torch profiler, which perturb
timing). Energy is never measured here: ``vlabench run`` measures it in a pass of its own.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from time import perf_counter_ns
from typing import Any, ClassVar, Literal

import torch
from pydantic import AwareDatetime, BaseModel

from vlabench.analysis.roofline import RooflineReport, analyze, ceilings_for
from vlabench.atomic import atomic_write_text
from vlabench.backends import get_backend
from vlabench.commands.run import RunPlan, backend_options, plan_run, seeded_inputs
from vlabench.config import RunConfig
from vlabench.hardware.detection import detect_host
from vlabench.kernels.ceilings import MeasuredCeiling, measure_ceilings
from vlabench.measure.action_loops import ActionLoop, make_sampler
from vlabench.measure.timing import Contender, SpanRecorder, phased_inference, warm_up
from vlabench.measure.trace_writer import ChromeTrace
from vlabench.models.workload import Workload
from vlabench.results.header import ArtifactHeader
from vlabench.results.provenance import Provenance, collect_provenance
from vlabench.telemetry.counters import Series, UtilizationCounter, counters_for
from vlabench.vocab import Phase

PROFILE_SCHEMA_VERSION = "1.0"
"""1.0: the artifact header (``schema_version`` and ``finished_utc`` added to the profile of before)."""


@dataclass(frozen=True)
class ProfileSettings:
    iterations: int = 5
    min_duration_s: float = 2.0  # the trace pass also lasts this long, so counters get enough samples
    operator_iterations: int = 2
    kernels: bool = False
    sample_period_s: float | None = None
    measure_ceilings: bool = True


class PassRecord(BaseModel):
    name: Literal["ceilings", "trace", "operators"]
    produced: str
    iterations: int
    duration_s: float
    instruments: list[str]


class CounterStat(BaseModel):
    unit: str
    key: str
    mean: float
    peak: float


class PhaseSummary(BaseModel):
    phase: str
    spans: int
    mean_ms: float
    share_of_e2e: float
    counters: dict[str, CounterStat]
    intensity: float | None = None
    bound: Literal["compute", "memory"] | None = None
    achieved_tflops: float | None = None
    share_of_attainable: float | None = None


class ProfileResult(ArtifactHeader):
    """``<stem>.profile.json``; the Chrome trace beside it (``trace_file``, ``<stem>.trace.json``) is no artifact."""

    kind: Literal["profile"] = "profile"
    schema_version: str = PROFILE_SCHEMA_VERSION
    run_id: str
    started_utc: AwareDatetime
    model: str
    device: str
    backend: str
    precision: str
    provenance: Provenance
    torch_device: str
    backend_details: dict[str, Any]
    workload: Workload
    passes: list[PassRecord]
    samplers: list[dict[str, Any]]
    measured_ceilings: list[MeasuredCeiling]
    summary: list[PhaseSummary]
    roofline: RooflineReport
    trace_file: str
    energy: None = None  # never measured in a profiling pass
    warnings: list[str]

    FILE_SUFFIX: ClassVar[str] = ".profile.json"

    def stem(self) -> str:
        parts = (self.model, self.device, self.backend, self.precision, self.run_id[:8])
        return "_".join((self.stamp(self.started_utc), *parts))


def run_profile(config: RunConfig, settings: ProfileSettings, out_dir: Path) -> ProfileResult:
    """Run the passes, then write ``<stem>.trace.json`` and ``<stem>.profile.json`` into ``out_dir`` atomically."""
    plan = plan_run(config.model_copy(update={"energy_meter": "none"}))
    started = datetime.now(timezone.utc)
    if config.threads:
        torch.set_num_threads(config.threads)
    target = plan.device.torch_device
    origin = perf_counter_ns()
    passes: list[PassRecord] = []
    measured: list[MeasuredCeiling] = []
    if settings.measure_ceilings:
        begin = perf_counter_ns()
        measured = measure_ceilings(target, (plan.precision,))
        passes.append(_pass("ceilings", "measured ceilings", 0, begin, ["kernels.ceilings"]))

    policy = plan.backend.prepare(plan.spec, plan.workload, target, plan.precision, config.seed)
    sampler = make_sampler(plan.spec, plan.workload, target)
    inputs = seeded_inputs(plan, plan.precision)
    warm_up(Contender(policy, sampler, inputs), config.warmup)
    counters = counters_for(target, detect_host().l4t_release is not None, settings.sample_period_s)
    begin = perf_counter_ns()
    recorder, series = _traced(policy, sampler, inputs, settings, counters)
    iterations = len(recorder.samples_ms["e2e"])
    passes.append(_pass("trace", "phase spans, counters, summary", iterations, begin, [s.source for s in counters]))
    del policy

    trace = ChromeTrace(origin, f"vlabench profile {plan.spec.name} {plan.backend.name} {plan.precision}")
    for name, start, end in recorder.events:
        trace.span(name, start, end, "phases (trace pass)")
    trace.counters(series)
    details: dict[str, Any] = {}
    operators = _operators_pass(plan, settings, inputs, trace)
    if operators is not None:
        record, details = operators
        passes.append(record)

    phase_ms = {name: statistics.median(values) for name, values in _phase_samples(recorder.events).items()}
    roofline = analyze(
        plan.spec,
        plan.workload,
        plan.precision,
        plan.device.profile.name,
        ceilings_for(plan.device.profile, plan.precision, measured),
        phase_ms,
    )
    result = ProfileResult(
        run_id=uuid.uuid4().hex,
        started_utc=started,
        model=plan.spec.name,
        device=plan.device.profile.name,
        torch_device=str(target),
        backend=plan.backend.name,
        backend_details=details,
        precision=plan.precision,
        workload=plan.workload,
        passes=passes,
        samplers=[s.describe() for s in counters],
        measured_ceilings=measured,
        summary=summarize_phases(recorder.events, series, roofline),
        roofline=roofline,
        trace_file="",
        warnings=list(plan.caveats),
        provenance=collect_provenance(detect_host(), torch.get_num_threads()),
        finished_utc=datetime.now(timezone.utc),
    )
    trace.metadata["vlabench"] = {"run_id": result.run_id, "passes": [p.model_dump() for p in passes]}
    trace_path = trace.write(out_dir / f"{result.stem()}.trace.json")
    result.trace_file = trace_path.name
    atomic_write_text(out_dir / result.file_name(), result.model_dump_json(indent=2))
    return result


def _pass(name: str, produced: str, iterations: int, begin_ns: int, instruments: list[str]) -> PassRecord:
    return PassRecord(
        name=name,  # type: ignore[arg-type]
        produced=produced,
        iterations=iterations,
        duration_s=(perf_counter_ns() - begin_ns) / 1e9,
        instruments=instruments,
    )


def _traced(
    policy, sampler: ActionLoop, inputs: Sequence[tuple], settings: ProfileSettings, counters: list[UtilizationCounter]
) -> tuple[SpanRecorder, list[Series]]:
    """At least ``iterations`` inferences lasting at least ``min_duration_s``, with the counters running."""
    recorder = SpanRecorder(policy.synchronize)
    for one in counters:
        one.start()
    started, index = perf_counter_ns(), 0
    try:
        while index < settings.iterations or (perf_counter_ns() - started) / 1e9 < settings.min_duration_s:
            obs, noise = inputs[index % len(inputs)]
            phased_inference(policy, sampler, obs, noise, recorder)
            index += 1
    finally:
        series = [s for one in counters for s in one.stop()]
    return recorder, series


class _AnnotatedRecorder(SpanRecorder):
    """Spans that also appear in the torch profiler (``vlabench::<name>``), to align its clock with ours."""

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        with torch.profiler.record_function(f"vlabench::{name}"), super().span(name):
            yield


def _operators_pass(
    plan: RunPlan, settings: ProfileSettings, inputs: Sequence[tuple], trace: ChromeTrace
) -> tuple[PassRecord, dict[str, Any]] | None:
    """The runtime's node profiler (ONNX Runtime, OpenVINO) and/or the torch profiler (``--kernels``)."""
    nodes = plan.backend.profiles_nodes
    if not nodes and not settings.kernels:
        return None
    options = backend_options(plan.config)
    backend = get_backend(plan.backend.name, replace(options, profile_nodes=nodes))
    target = plan.device.torch_device
    policy = backend.prepare(plan.spec, plan.workload, target, plan.precision, plan.config.seed)
    sampler = make_sampler(plan.spec, plan.workload, target)
    warm_up(Contender(policy, sampler, inputs), 1)
    instruments = [f"{backend.name} node profiler"] if nodes else []
    begin = perf_counter_ns()
    recorder: SpanRecorder = (
        _AnnotatedRecorder(policy.synchronize) if settings.kernels else SpanRecorder(policy.synchronize)
    )
    profiler = _torch_profiler(target) if settings.kernels else None
    if profiler is not None:
        instruments.append("torch.profiler")
        profiler.start()
    for index in range(settings.operator_iterations):
        obs, noise = inputs[index % len(inputs)]
        phased_inference(policy, sampler, obs, noise, recorder)
    if profiler is not None:
        profiler.stop()
    record = _pass("operators", "operator/kernel events in the trace", settings.operator_iterations, begin, instruments)
    for name, start, end in recorder.events:
        trace.span(name, start, end, "phases (operators pass)")
    track = f"{backend.name} nodes (operators pass)"
    for event in policy.node_events():
        if event.start_ns >= begin:
            trace.span(
                event.name,
                event.start_ns,
                event.end_ns,
                track,
                {"op": event.op_type, "graph": event.graph, **event.args},
            )
    if profiler is not None:
        _merge_torch_profile(profiler, recorder, trace)
    return record, policy.details()


def _torch_profiler(target: torch.device) -> torch.profiler.profile:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if target.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities, record_shapes=True)


def _merge_torch_profile(profiler: torch.profiler.profile, recorder: SpanRecorder, trace: ChromeTrace) -> None:
    """Shift the profiler's events so its first ``vlabench::e2e`` annotation starts where our span did."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "torch.json"
        profiler.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    ours = next(start for name, start, _ in recorder.events if name == "e2e")
    anchors = [e for e in events if e.get("name") == "vlabench::e2e" and e.get("ph") == "X"]
    if not anchors:
        return
    shift = trace.us(ours) - min(float(e["ts"]) for e in anchors)
    trace.external(events, "torch profiler", shift)


def phase_windows(events: Sequence[tuple[str, int, int]]) -> dict[str, list[tuple[int, int]]]:
    """(start, end) ns of every span per summary phase."""
    windows: dict[str, list[tuple[int, int]]] = {}
    for name, start, end in events:
        phase = Phase.of_span(name)
        if phase in Phase.SUMMARY:
            windows.setdefault(phase, []).append((start, end))
    return windows


def _phase_samples(events: Sequence[tuple[str, int, int]]) -> dict[str, list[float]]:
    """Span durations (ms) per summary phase."""
    return {phase: [(end - start) / 1e6 for start, end in spans] for phase, spans in phase_windows(events).items()}


def summarize_phases(
    events: Sequence[tuple[str, int, int]], series: Sequence[Series], roofline: RooflineReport | None
) -> list[PhaseSummary]:
    """Per phase: mean duration, share of end-to-end time, and each counter's headline value averaged over the
    phase's spans (weighted by how much of each sample's interval falls inside them) and its peak."""
    windows = phase_windows(events)
    e2e_total = sum(end - start for start, end in windows.get("e2e", []))
    rows = []
    for phase in Phase.SUMMARY:
        spans = windows.get(phase)
        if not spans:
            continue
        duration = sum(end - start for start, end in spans)
        row = PhaseSummary(
            phase=phase,
            spans=len(spans),
            mean_ms=duration / len(spans) / 1e6,
            share_of_e2e=duration / e2e_total if e2e_total else 0.0,
            counters={s.name: stat for s in series if (stat := _counter_stat(s, spans)) is not None},
        )
        if roofline is not None:
            analytic = roofline.phase(phase)
            row.intensity = analytic.intensity
            row.bound = analytic.bounds[roofline.primary].bound if roofline.primary else None
            row.achieved_tflops = analytic.achieved_tflops
            row.share_of_attainable = analytic.share_of_attainable
        rows.append(row)
    return rows


def _counter_stat(series: Series, spans: list[tuple[int, int]]) -> CounterStat | None:
    key = series.headline or next(iter(series.samples), None)
    if key is None or key not in series.samples:
        return None
    weighted = weight = 0.0
    peak: float | None = None
    for sample in series.samples[key]:
        overlap = sum(max(0, min(end, sample.end_ns) - max(start, sample.start_ns)) for start, end in spans)
        if overlap <= 0:
            continue
        weighted += sample.value * overlap
        weight += overlap
        peak = sample.value if peak is None else max(peak, sample.value)
    if peak is None:
        return None
    return CounterStat(unit=series.unit, key=key, mean=weighted / weight, peak=peak)
