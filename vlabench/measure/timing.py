"""Timing loop: warm-up, then interleaved phase-synchronized and unsynchronized iterations."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter_ns

from torch import Tensor

from vlabench.measure.action_loops import ActionLoop
from vlabench.measure.policy import PreparedPolicy
from vlabench.models.input_pipeline import InputPipeline, RawObservation
from vlabench.models.replicas import Observation
from vlabench.telemetry.energy.base import EnergyMeter, EnergyReading
from vlabench.vocab import Phase

Progress = Callable[[int, int], None]
SETTLE_S = 1.0
"""Pause before an energy pass, so clocks and a sensor's averaged readings leave the timing pass behind."""


def settling_pause_s(meter: EnergyMeter) -> float:
    """The pause before ``meter``'s first window: ``SETTLE_S`` for a sensor, none for an estimate (its utilization is
    this process's CPU time per interval, counted exactly: nothing trails the timing pass)."""
    return SETTLE_S if meter.label == "measured" else 0.0


@dataclass(frozen=True)
class RunnerSettings:
    """A contender stops counting once it has ``min_iterations`` and ``min_duration_s`` of timed work, or at
    ``max_iterations`` or ``max_duration_s``, whichever comes first."""

    warmup: int
    min_iterations: int
    min_duration_s: float
    max_iterations: int
    max_duration_s: float = math.inf


class SpanRecorder:
    """Named wall-clock spans; the target is synchronized at both edges so each span covers finished work."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self.synchronize = synchronize
        self.samples_ms: dict[str, list[float]] = defaultdict(list)
        self.events: list[tuple[str, int, int]] = []  # (name, start_ns, end_ns) on the perf_counter clock

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        self.synchronize()
        start = perf_counter_ns()
        yield
        self.synchronize()
        end = perf_counter_ns()
        self.samples_ms[name].append((end - start) / 1e6)
        self.events.append((name, start, end))


@dataclass
class Measurement:
    samples_ms: dict[str, list[float]]
    first_inference_ms: float
    iterations: int
    timed_duration_s: float
    actions: Tensor = field(repr=False)
    iteration_starts_ns: list[int] = field(default_factory=list, repr=False)  # on the perf_counter clock
    after_idle_ms: float | None = None  # an inference after an idle period (``after_idle``), when probed


@dataclass(frozen=True)
class Pipelined:
    """The input pipeline around an inference, and the raw observation it starts from."""

    pipeline: InputPipeline
    raw: RawObservation


def phased_inference(
    policy: PreparedPolicy,
    loop: ActionLoop,
    obs: Observation,
    noise: Tensor,
    recorder: SpanRecorder,
    pipelined: Pipelined | None = None,
) -> Tensor:
    """One inference with a synchronized span around every phase and every denoising step; with ``pipelined``, the
    observation is preprocessed from its raw form first and the actions postprocessed after, each its own span.
    Returns the model's actions (before postprocessing)."""
    with recorder.span("e2e"):
        if pipelined is not None:
            with recorder.span("preprocess"):
                obs = pipelined.pipeline.preprocess(pipelined.raw)
        with recorder.span("prefix"):
            with recorder.span("vision"):
                image_tokens = policy.embed_images(obs)
            with recorder.span("prefill"):
                cache = policy.prefill(obs, image_tokens)
        with recorder.span("action"):
            fused = policy.fused_loop()
            if fused is not None:
                actions = fused(cache, noise)
            else:
                actions = loop.sample(policy, cache, noise, lambda i: recorder.span(Phase.step_span(i)))
        if pipelined is not None:
            with recorder.span("postprocess"):
                pipelined.pipeline.postprocess(actions)
    return actions


def plain_inference(
    policy: PreparedPolicy, loop: ActionLoop, obs: Observation, noise: Tensor, pipelined: Pipelined | None = None
) -> Tensor:
    """One inference with no synchronization inside (the caller synchronizes once at the end); with ``pipelined``,
    pre- and postprocessing around it. Returns the model's actions (before postprocessing)."""
    if pipelined is not None:
        obs = pipelined.pipeline.preprocess(pipelined.raw)
    fused = policy.fused_loop()
    cache = policy.prefix(obs)
    actions = fused(cache, noise) if fused is not None else loop.sample(policy, cache, noise)
    if pipelined is not None:
        pipelined.pipeline.postprocess(actions)
    return actions


@dataclass
class Contender:
    """One prepared policy with its action loop and its inputs (already on its target, in its dtype); with
    ``pipelined``, one raw observation per input that every timed inference is preprocessed from."""

    policy: PreparedPolicy
    loop: ActionLoop
    inputs: Sequence[tuple[Observation, Tensor]]
    pipelined: Sequence[Pipelined] = ()

    def example(self, index: int) -> tuple[Observation, Tensor, Pipelined | None]:
        """Input ``index`` (cycled): its observation, its noise and, when the pipeline is timed, its raw form."""
        obs, noise = self.inputs[index % len(self.inputs)]
        return obs, noise, self.pipelined[index % len(self.pipelined)] if self.pipelined else None


def measure(
    policy: PreparedPolicy,
    loop: ActionLoop,
    inputs: Sequence[tuple[Observation, Tensor]],
    settings: RunnerSettings,
    progress: Progress | None = None,
) -> Measurement:
    """Warm up, then alternate phased and unsynchronized iterations until both the minimum iteration count and
    the minimum duration are met (or ``max_iterations`` is reached). Inputs are cycled, already on the target."""
    return measure_interleaved([Contender(policy, loop, inputs)], settings, progress)[0]


def measure_interleaved(
    contenders: Sequence[Contender], settings: RunnerSettings, progress: Progress | None = None
) -> list[Measurement]:
    """Round-robin one iteration per contender so machine drift affects all of them alike; each stops counting
    once it has its minimum iterations and its own minimum timed duration."""
    first_inference_ms = [warm_up(c, settings.warmup) for c in contenders]
    recorders = [SpanRecorder(c.policy.synchronize) for c in contenders]
    unsynced: list[list[float]] = [[] for _ in contenders]
    timed_ns = [0] * len(contenders)
    iterations = [0] * len(contenders)
    actions: list[Tensor | None] = [None] * len(contenders)

    starts: list[list[int]] = [[] for _ in contenders]

    def done(i: int) -> bool:
        timed_s = timed_ns[i] / 1e9
        enough = iterations[i] >= settings.min_iterations and timed_s >= settings.min_duration_s
        return enough or iterations[i] >= settings.max_iterations or timed_s >= settings.max_duration_s

    while not all(done(i) for i in range(len(contenders))):
        for i, contender in enumerate(contenders):
            if done(i):
                continue
            policy, loop = contender.policy, contender.loop
            obs, noise, pipelined = contender.example(iterations[i])
            begin = perf_counter_ns()
            starts[i].append(begin)
            actions[i] = phased_inference(policy, loop, obs, noise, recorders[i], pipelined)
            policy.synchronize()
            middle = perf_counter_ns()
            plain_inference(policy, loop, obs, noise, pipelined)
            policy.synchronize()
            end = perf_counter_ns()
            unsynced[i].append((end - middle) / 1e6)
            timed_ns[i] += end - begin
            iterations[i] += 1
        if progress:
            expected = [_expected_iterations(settings, n, t) for n, t in zip(iterations, timed_ns, strict=True)]
            progress(sum(iterations), sum(expected))
    return [
        Measurement(
            samples_ms={**recorders[i].samples_ms, "e2e_unsynced": unsynced[i]},
            first_inference_ms=first_inference_ms[i],
            iterations=iterations[i],
            timed_duration_s=timed_ns[i] / 1e9,
            actions=actions[i],
            iteration_starts_ns=starts[i],
        )
        for i in range(len(contenders))
    ]


def warm_up(contender: Contender, warmup: int) -> float:
    """Untimed inferences (at least one); returns the first one's latency."""
    recorder = SpanRecorder(contender.policy.synchronize)
    for index in range(max(warmup, 1)):
        obs, noise, pipelined = contender.example(index)
        phased_inference(contender.policy, contender.loop, obs, noise, recorder, pipelined)
    return recorder.samples_ms["e2e"][0]


def _expected_iterations(settings: RunnerSettings, done: int, elapsed_ns: int) -> int:
    per_iteration_s = elapsed_ns / 1e9 / done
    by_duration = int(settings.min_duration_s / per_iteration_s) + 1 if per_iteration_s > 0 else done
    capped = per_iteration_s > 0 and math.isfinite(settings.max_duration_s)
    by_cap = int(settings.max_duration_s / per_iteration_s) + 1 if capped else settings.max_iterations
    return min(settings.max_iterations, by_cap, max(settings.min_iterations, by_duration, done))


def after_idle(contender: Contender, idle_s: float) -> float:
    """The end-to-end latency of one inference after ``idle_s`` seconds of nothing (caches cold, clocks down)."""
    contender.policy.synchronize()
    time.sleep(idle_s)
    recorder = SpanRecorder(contender.policy.synchronize)
    obs, noise, pipelined = contender.example(0)
    phased_inference(contender.policy, contender.loop, obs, noise, recorder, pipelined)
    return recorder.samples_ms["e2e"][0]


@dataclass
class EnergyWindows:
    idle: EnergyReading
    busy: EnergyReading
    iterations: int


def measure_energy(contender: Contender, meter: EnergyMeter, window_s: float, idle_s: float) -> EnergyWindows:
    """A pass of its own (no profiler, no phase spans): after a settling pause for a sensor (``settling_pause_s``),
    idle power first, then whole inferences (with the input pipeline when it is timed) for ≥ window_s."""
    policy = contender.policy
    policy.synchronize()
    time.sleep(settling_pause_s(meter))
    meter.start()
    time.sleep(idle_s)
    idle = meter.stop()
    iterations = 0
    meter.start()
    started = perf_counter_ns()
    while iterations == 0 or (perf_counter_ns() - started) / 1e9 < window_s:
        plain_inference(policy, contender.loop, *contender.example(iterations))
        policy.synchronize()
        iterations += 1
    return EnergyWindows(idle=idle, busy=meter.stop(), iterations=iterations)
