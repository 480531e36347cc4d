"""Cold start: what a backend does before the first inference (build or load the model, export, convert, quantize,
compile, build an engine), each stage timed on the wall clock while ``prepare`` runs.

Backends mark their stages with ``with stage("export") as timed: ...``; outside ``recording()`` that is a no-op.
Stages nest (an export builds the model it exports): each records its own time without its inner stages', so the
stages are disjoint and their sum is at most the whole preparation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import TypeVar

T = TypeVar("T")

STAGES: dict[str, str] = {
    "load": "build the model and put its weights on the target",
    "export": "export the graphs (ONNX)",
    "convert": "convert the graphs to the runtime's format (OpenVINO IR)",
    "quantize": "quantize the weights (and calibrate activations)",
    "compile": "compile: runtime sessions and compiled models, torch.compile graphs, captured CUDA graphs",
    "engine_build": "build the TensorRT engines",
}
"""Stage name → what it covers, in the order a preparation goes through them."""


@dataclass
class TimedStage:
    """One stage's exclusive wall time; ``cached`` when it reused an artifact from disk instead of doing the work."""

    name: str
    cached: bool = False
    seconds: float = 0.0
    inner_ns: int = 0


@dataclass
class StageClock:
    """The stages recorded during one preparation, in the order they ended."""

    stages: list[TimedStage] = field(default_factory=list)
    open: list[TimedStage] = field(default_factory=list)

    def totals(self) -> dict[str, TimedStage]:
        """Stage name → its summed time (a stage may run once per graph); cached only when every run of it was."""
        summed: dict[str, TimedStage] = {}
        for timed in self.stages:
            total = summed.setdefault(timed.name, TimedStage(timed.name, cached=True))
            total.seconds += timed.seconds
            total.cached = total.cached and timed.cached
        return summed


@dataclass(frozen=True)
class Preparation:
    """A whole preparation: its wall time and its stages' (their sum is at most ``seconds``)."""

    seconds: float
    stages: dict[str, TimedStage]


def timed_preparation(prepare: Callable[[], T]) -> tuple[T, Preparation]:
    """Run ``prepare`` with its stages recorded."""
    with recording() as clock:
        start = perf_counter_ns()
        prepared = prepare()
        seconds = (perf_counter_ns() - start) / 1e9
    return prepared, Preparation(seconds, clock.totals())


_clock: ContextVar[StageClock | None] = ContextVar("vlabench_stage_clock", default=None)


@contextmanager
def recording() -> Iterator[StageClock]:
    """Collect the stages marked inside this block."""
    clock = StageClock()
    token = _clock.set(clock)
    try:
        yield clock
    finally:
        _clock.reset(token)


@contextmanager
def stage(name: str) -> Iterator[TimedStage]:
    """Time the block as stage ``name`` (one of :data:`STAGES`) when a ``recording()`` is active."""
    if name not in STAGES:
        raise ValueError(f"unknown cold-start stage {name!r}; stages: {', '.join(STAGES)}")
    timed = TimedStage(name)
    clock = _clock.get()
    if clock is None:
        yield timed
        return
    clock.open.append(timed)
    start = perf_counter_ns()
    try:
        yield timed
    finally:
        elapsed = perf_counter_ns() - start
        clock.open.pop()
        if clock.open:
            clock.open[-1].inner_ns += elapsed
        timed.seconds = (elapsed - timed.inner_ns) / 1e9
        clock.stages.append(timed)
