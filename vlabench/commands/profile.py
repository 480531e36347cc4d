"""``vlabench profile``: phase spans and utilization counters on one clock, the runtime's own operator profile,
and a per-phase summary with the roofline verdict.

Passes, in order, each recorded in the result: ``ceilings`` (GEMM and bandwidth micro-benchmarks), ``trace``
(phase spans + utilization counters, nothing else: its durations feed the summary), on GPUs with NVML GPM ``gpm``
(each phase repeated on its own between GPM samples, ``telemetry/gpm.py``) and, for ONNX Runtime / OpenVINO, with
``--kernels`` or on any CUDA GPU, ``operators`` (the runtime's per-node profiler and/or the torch profiler, which
perturb timing; its CUDA kernel records give the kernel-derived SM coverage, ``analysis/sm_coverage.py``). Energy
is never measured here: ``vlabench run`` measures it in a pass of its own.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import torch

from vlabench.analysis.phase_summary import SmTracing, gpm_phases, phase_samples, phase_windows, span_args
from vlabench.analysis.phase_summary import summarize_phases as summarize_phases
from vlabench.analysis.roofline import analyze, ceilings_for
from vlabench.analysis.sm_coverage import GpuSm, gpu_sm_of, kernel_report
from vlabench.atomic import atomic_write_text
from vlabench.commands.run import RunPlan, plan_run, prepare_contender
from vlabench.config import RunConfig
from vlabench.hardware.detection import detect_host
from vlabench.kernels.ceilings import MeasuredCeiling, measure_ceilings
from vlabench.measure.action_loops import ActionLoop
from vlabench.measure.timing import Contender, SpanRecorder, phased_inference, warm_up
from vlabench.measure.trace_writer import ChromeTrace
from vlabench.results.profile_artifact import PassRecord, ProfileResult
from vlabench.results.provenance import collect_provenance
from vlabench.telemetry.counters import Series, UtilizationCounter, counters_for
from vlabench.telemetry.gpm import WINDOW_S, WINDOWS, GpmWindows, describe_gpm, run_gpm_pass
from vlabench.vocab import Phase


@dataclass(frozen=True)
class ProfileSettings:
    iterations: int = 5
    min_duration_s: float = 2.0  # the trace pass also lasts this long, so counters get enough samples
    operator_iterations: int = 2
    kernels: bool = False
    sample_period_s: float | None = None
    measure_ceilings: bool = True
    gpm: bool = True  # the GPM pass on CUDA GPUs that support it
    sm_coverage: bool = True  # on CUDA the torch-profiler pass runs even without ``kernels``, for its kernel records
    gpm_window_s: float = WINDOW_S
    gpm_windows: int = WINDOWS


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

    contender = prepare_contender(plan)
    policy, loop, inputs = contender.policy, contender.loop, contender.inputs
    warm_up(contender, config.warmup)
    counters = counters_for(target, detect_host().l4t_release is not None, settings.sample_period_s)
    begin = perf_counter_ns()
    recorder, series = _traced(contender, settings, counters)
    iterations = len(recorder.samples_ms["e2e"])
    passes.append(_pass("trace", "phase spans, counters, summary", iterations, begin, [s.source for s in counters]))
    tracing = SmTracing(gpu=_gpu_sm(target), kernels={"available": False, "reason": _no_kernels(target, settings)})
    gpm = _gpm_pass(policy, loop, inputs, target, settings, tracing)
    del policy

    trace = ChromeTrace(origin, f"vlabench profile {plan.spec.name} {plan.backend.name} {plan.precision}")
    trace.counters(series)
    if gpm is not None:
        passes.append(gpm[0])
        for name, start, end in gpm[1].events:
            trace.span(name, start, end, "phases (gpm pass)")
        trace.counters(gpm[1].series)
    details: dict[str, Any] = {}
    operators = _operators_pass(plan, settings, trace, tracing)
    if operators is not None:
        record, details = operators
        passes.append(record)

    phase_ms = {name: statistics.median(values) for name, values in phase_samples(recorder.events).items()}
    roofline = analyze(
        plan.spec,
        plan.workload,
        plan.precision,
        plan.device.profile.name,
        ceilings_for(plan.device.profile, plan.precision, measured),
        phase_ms,
    )
    summary = summarize_phases(recorder.events, series, roofline, tracing)
    rows = {row.phase: row for row in summary}
    for name, start, end in recorder.events:
        trace.span(name, start, end, "phases (trace pass)", span_args(rows.get(Phase.of_span(name))))
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
        counters=[s.describe() for s in counters],
        measured_ceilings=measured,
        summary=summary,
        roofline=roofline,
        sm_tracing=tracing,
        trace_file="",
        warnings=list(plan.caveats),
        provenance=collect_provenance(detect_host(), torch.get_num_threads()),
        finished_utc=datetime.now(timezone.utc),
    )
    trace.metadata["vlabench"] = {
        "run_id": result.run_id,
        "passes": [p.model_dump() for p in passes],
        "sm_tracing": {"gpm": tracing.gpm, "kernels": tracing.kernels},
    }
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
    contender: Contender, settings: ProfileSettings, counters: list[UtilizationCounter]
) -> tuple[SpanRecorder, list[Series]]:
    """At least ``iterations`` inferences (the input pipeline's phases included when it is timed) lasting at least
    ``min_duration_s``, with the counters running."""
    recorder = SpanRecorder(contender.policy.synchronize)
    for one in counters:
        one.start()
    started, index = perf_counter_ns(), 0
    try:
        while index < settings.iterations or (perf_counter_ns() - started) / 1e9 < settings.min_duration_s:
            obs, noise, pipelined = contender.example(index)
            phased_inference(contender.policy, contender.loop, obs, noise, recorder, pipelined)
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
    plan: RunPlan, settings: ProfileSettings, trace: ChromeTrace, tracing: SmTracing
) -> tuple[PassRecord, dict[str, Any]] | None:
    """The runtime's node profiler (ONNX Runtime, OpenVINO) and/or the torch profiler (``--kernels``, or on CUDA for
    the kernel-derived SM coverage, which it writes into ``tracing``)."""
    nodes = plan.backend.profiles_nodes
    kernels = settings.kernels or (plan.device.torch_device.type == "cuda" and settings.sm_coverage)
    settings = replace(settings, kernels=kernels)
    if not nodes and not settings.kernels:
        return None
    backend = type(plan.backend).from_options(replace(plan.options, profile_nodes=nodes))
    target = plan.device.torch_device
    contender = prepare_contender(plan, backend=backend)
    policy, loop = contender.policy, contender.loop
    warm_up(contender, 1)
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
        obs, noise, pipelined = contender.example(index)
        phased_inference(policy, loop, obs, noise, recorder, pipelined)
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
        merged = _merge_torch_profile(profiler, recorder, trace)
        if merged is None:
            tracing.kernels["reason"] = "no vlabench::e2e annotation to align the torch profiler's clock with"
        elif tracing.gpu is not None:
            _kernel_coverage(*merged, recorder, trace, tracing)
    return record, policy.details()


def _torch_profiler(target: torch.device) -> torch.profiler.profile:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if target.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities, record_shapes=True)


def _merge_torch_profile(
    profiler: torch.profiler.profile, recorder: SpanRecorder, trace: ChromeTrace
) -> tuple[list[dict[str, Any]], float] | None:
    """Shift the profiler's events so its first ``vlabench::e2e`` annotation starts where our span did; the events
    (unshifted) and the shift in µs."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "torch.json"
        profiler.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    ours = next(start for name, start, _ in recorder.events if name == "e2e")
    anchors = [e for e in events if e.get("name") == "vlabench::e2e" and e.get("ph") == "X"]
    if not anchors:
        return None
    shift = trace.us(ours) - min(float(e["ts"]) for e in anchors)
    trace.external(events, "torch profiler", shift)
    return events, shift


def _kernel_coverage(
    events: list[dict[str, Any]], shift_us: float, recorder: SpanRecorder, trace: ChromeTrace, tracing: SmTracing
) -> None:
    """SM coverage per phase from the CUDA kernel records (shifted onto the spans' clock), and its counter tracks."""
    assert tracing.gpu is not None
    windows = {p: [(trace.us(a), trace.us(b)) for a, b in w] for p, w in phase_windows(recorder.events).items()}

    def to_ns(us: float) -> int:
        return trace.origin_ns + round(us * 1e3)

    tracing.kernels, tracing.kernel_phases, tracks = kernel_report(events, shift_us, windows, tracing.gpu, to_ns)
    trace.counters(tracks)


def _gpu_sm(target: torch.device) -> GpuSm | None:
    return gpu_sm_of(torch.cuda.get_device_properties(target)) if target.type == "cuda" else None


def _no_kernels(target: torch.device, settings: ProfileSettings) -> str:
    if target.type != "cuda":
        return "not a CUDA device: no CUDA kernel records"
    return "turned off" if not (settings.sm_coverage or settings.kernels) else "the operators pass did not run"


def _gpm_pass(
    policy, loop: ActionLoop, inputs: Sequence[tuple], target: torch.device, settings: ProfileSettings, tracing
) -> tuple[PassRecord, GpmWindows] | None:
    """Each phase repeated on its own between NVML GPM samples; why not, in ``tracing.gpm``, where it cannot run."""
    if target.type != "cuda" or not settings.gpm:
        tracing.gpm = describe_gpm("not a CUDA device" if target.type != "cuda" else "turned off")
        return None
    begin = perf_counter_ns()
    workloads = _phase_workloads(policy, loop, inputs)
    measured, reason = run_gpm_pass(workloads, target.index or 0, settings.gpm_window_s, settings.gpm_windows)
    tracing.gpm = describe_gpm(reason, settings.gpm_window_s, settings.gpm_windows)
    if measured is None:
        return None
    tracing.gpm = {**tracing.gpm, "repetitions": measured.repetitions}
    tracing.gpm_phases = gpm_phases(measured)
    produced = "GPM metrics per phase (phase-isolated windows)"
    return _pass("gpm", produced, sum(measured.repetitions.values()), begin, ["nvml gpm"]), measured


def _phase_workloads(policy, loop: ActionLoop, inputs: Sequence[tuple]) -> dict[str, Callable[[], None]]:
    """One synchronized call of each phase on the first input, as the trace pass spans it; e2e chains them."""
    obs, noise = inputs[0]
    tokens = policy.embed_images(obs)
    cache = policy.prefill(obs, tokens)
    fused = policy.fused_loop()

    def vision() -> None:
        policy.embed_images(obs)
        policy.synchronize()

    def prefill() -> None:
        policy.prefill(obs, tokens)
        policy.synchronize()

    def step() -> None:
        loop.sample_partial(policy, cache, noise, steps=range(1))
        policy.synchronize()

    def action(prefix=cache) -> None:
        fused(prefix, noise) if fused is not None else loop.sample(policy, prefix, noise)
        policy.synchronize()

    def e2e() -> None:
        image_tokens = policy.embed_images(obs)
        policy.synchronize()
        prefix = policy.prefill(obs, image_tokens)
        policy.synchronize()
        action(prefix)

    workloads = {"vision": vision, "prefill": prefill, "denoise_step": step, "action": action, "e2e": e2e}
    if fused is not None:  # the fused loop has no step of its own to repeat
        del workloads["denoise_step"]
    return workloads
