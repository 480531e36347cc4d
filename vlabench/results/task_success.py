"""Closed-loop task success of a trained policy under each way of running it, as ``vlabench fidelity`` records it
(the ``task_success`` block of a fidelity artifact), with every derived figure recomputed when read.

Each variant keeps its per-episode outcomes (``"1"`` success, ``"0"`` failure, in episode order per task), from which
the success counts, rates, Wilson 95% intervals, the paired difference to the reference (Newcombe's hybrid score
interval) and the mark are recomputed; its policy time per control cycle gives the speedup over the reference's,
measured in the same run. A file whose stored figures disagree with that recomputation is refused.

A variant is marked ``below_reference`` when its success interval lies wholly below the reference's (its upper end
under the reference's lower end).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field, model_validator

from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.proportions import paired_difference, wilson_interval
from vlabench.measure.stats import Stats

TOLERANCE = 1e-6


def _close(stored: float | None, computed: float | None) -> bool:
    if stored is None or computed is None:
        return stored is computed
    return math.isclose(stored, computed, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def _pair_close(stored: tuple[float, float] | None, computed: tuple[float, float] | None) -> bool:
    if stored is None or computed is None:
        return stored is computed
    return all(_close(a, b) for a, b in zip(stored, computed, strict=True))


class TaskOutcomes(BaseModel):
    """One variant's episodes of one task."""

    task: str
    outcomes: str = Field(pattern=r"^[01]+$", description="one character per episode: 1 success, 0 failure")
    successes: int = Field(ge=0)
    episodes: int = Field(gt=0)
    success_rate: float
    interval: tuple[float, float] = Field(description="Wilson 95% interval of the success rate")
    mean_steps: float = Field(description="mean steps per episode (a failed episode counts its step limit)")

    @model_validator(mode="after")
    def _recomputed(self) -> TaskOutcomes:
        successes, episodes = self.outcomes.count("1"), len(self.outcomes)
        if (self.successes, self.episodes) != (successes, episodes):
            raise ValueError(f"{self.task}: {self.successes} of {self.episodes} stored, the outcomes hold {successes}")
        if not _close(self.success_rate, successes / episodes):
            raise ValueError(f"{self.task}: success rate {self.success_rate} is not {successes}/{episodes}")
        if not _pair_close(self.interval, wilson_interval(successes, episodes)):
            raise ValueError(f"{self.task}: interval {self.interval} is not the Wilson interval of the outcomes")
        return self


def optimization_label(dp_cache: DPCacheSchedule | None, fuse_expert_kv: bool, stale_steps: int = 0) -> str:
    """How the action expert was run, in one phrase shared by closed-loop rows and run results."""
    parts = [f"dp-cache {dp_cache.label()}"] if dp_cache is not None else []
    parts += ["fuse-expert-kv"] if fuse_expert_kv else []
    parts += [f"v-aefusion s={stale_steps}"] if stale_steps else []
    return " + ".join(parts) or "none"


def task_outcomes(task: str, outcomes: list[bool], steps: list[int]) -> TaskOutcomes:
    if not outcomes or len(outcomes) != len(steps):
        raise ValueError(f"{task}: {len(outcomes)} outcomes and {len(steps)} step counts (need one each per episode)")
    text = "".join("1" if ok else "0" for ok in outcomes)
    successes = text.count("1")
    return TaskOutcomes(
        task=task,
        outcomes=text,
        successes=successes,
        episodes=len(text),
        success_rate=successes / len(text),
        interval=wilson_interval(successes, len(text)),
        mean_steps=sum(steps) / len(steps),
    )


class VariantSuccess(BaseModel):
    """One way of running the policy (or the scripted expert) on the benchmark's episodes."""

    variant: str
    backend: str | None = Field(description="None: the scripted expert")
    precision: str | None
    optimization: str = Field(description="none, dp-cache {steps}, v-aefusion s=N, fuse-expert-kv or steps N")
    dp_cache: DPCacheSchedule | None = None
    stale_steps: int = 0
    fuse_expert_kv: bool = False
    steps: int | None = Field(description="denoising steps per chunk (None: the scripted expert)")
    executed_on: str | None = Field(default=None, description="where the runtime ran, read back from it")
    scheme: str | None = Field(default=None, description="how weights were cast or quantized")
    tasks: list[TaskOutcomes]
    successes: int
    episodes: int
    success_rate: float
    interval: tuple[float, float]
    difference: float | None = Field(default=None, description="success rate minus the reference's")
    difference_interval: tuple[float, float] | None = Field(default=None, description="paired, Newcombe 95%")
    below_reference: bool = False
    cycle_ms: Stats | None = Field(default=None, description="the policy's time per control cycle")
    speedup: float | None = Field(default=None, description="the reference's median cycle time over this one's")

    def outcomes(self) -> list[bool]:
        return [char == "1" for task in self.tasks for char in task.outcomes]

    @model_validator(mode="after")
    def _recomputed(self) -> VariantSuccess:
        successes, episodes = sum(t.successes for t in self.tasks), sum(t.episodes for t in self.tasks)
        if (self.successes, self.episodes) != (successes, episodes) or not self.tasks:
            raise ValueError(f"{self.variant}: overall {self.successes} of {self.episodes} is not its tasks' sum")
        if not _close(self.success_rate, successes / episodes):
            raise ValueError(f"{self.variant}: success rate {self.success_rate} is not {successes}/{episodes}")
        if not _pair_close(self.interval, wilson_interval(successes, episodes)):
            raise ValueError(f"{self.variant}: interval {self.interval} is not the Wilson interval of its outcomes")
        return self


def variant_success(variant: str, tasks: list[TaskOutcomes], **fields) -> VariantSuccess:
    """A variant's row with its overall figures computed from ``tasks`` (no reference comparison yet)."""
    successes, episodes = sum(t.successes for t in tasks), sum(t.episodes for t in tasks)
    return VariantSuccess(
        variant=variant,
        tasks=tasks,
        successes=successes,
        episodes=episodes,
        success_rate=successes / episodes,
        interval=wilson_interval(successes, episodes),
        **fields,
    )


def compared(row: VariantSuccess, reference: VariantSuccess) -> VariantSuccess:
    """``row`` with its difference to ``reference`` (paired over the same episodes), the mark and the speedup."""
    difference, low, high = paired_difference(row.outcomes(), reference.outcomes())
    speedup = None
    if row.cycle_ms is not None and reference.cycle_ms is not None and row.cycle_ms.p50 > 0:
        speedup = reference.cycle_ms.p50 / row.cycle_ms.p50
    return row.model_copy(
        update={
            "difference": difference,
            "difference_interval": (low, high),
            "below_reference": row.interval[1] < reference.interval[0],
            "speedup": speedup,
        }
    )


class TaskSuccessReport(BaseModel):
    """The closed loop of a trained policy on a benchmark: the scripted expert's ceiling, the random floor, then
    every variant."""

    benchmark: str = Field(description="e.g. Meta-World v3 (metaworld 3.1.1, MuJoCo 3.3.0)")
    episodes_from: str = Field(description="which scenes the episodes play")
    device: str = Field(description="the device profile the variants ran on")
    checkpoint: str = Field(description="the trained weights' stamp (path:size:mtime)")
    checkpoint_sha256: str
    tasks: dict[str, str] = Field(description="task → the instruction the policy was given")
    camera: str
    image_size: int
    max_steps: int = Field(gt=0, description="an episode fails when not solved within this many steps")
    chunk: int = Field(gt=0)
    actions_per_chunk: int = Field(gt=0, description="actions executed per inference, one frame per inference")
    seed: int
    threads: int = Field(gt=0, description="intra-op threads of every backend")
    interrupted: bool = Field(
        default=False, description="stopped early (Ctrl-C): only the episodes every variant completed are kept"
    )
    reference: str = Field(description="the variant every other is compared with (fp32 eager torch)")
    expert: VariantSuccess = Field(description="Meta-World's scripted expert: the ceiling")
    random: VariantSuccess = Field(description="uniform random actions: the floor")
    variants: list[VariantSuccess]

    def row(self, name: str) -> VariantSuccess:
        return next(row for row in self.variants if row.variant == name)

    @model_validator(mode="after")
    def _compared(self) -> TaskSuccessReport:
        names = [row.variant for row in self.variants]
        if self.reference not in names or len(set(names)) != len(names):
            raise ValueError(f"variants {names} must be distinct and hold the reference {self.reference!r}")
        reference = self.row(self.reference)
        layout = [(t.task, t.episodes) for t in reference.tasks]
        for row in [self.expert, self.random, *self.variants]:
            if [(t.task, t.episodes) for t in row.tasks] != layout or {t.task for t in row.tasks} != set(self.tasks):
                raise ValueError(f"{row.variant}: its tasks and episodes differ from the reference's")
            expected = compared(row, reference)
            for name in ("difference", "below_reference", "speedup"):
                if not _close(getattr(row, name), getattr(expected, name)):
                    raise ValueError(
                        f"{row.variant}: stored {name} {getattr(row, name)} is not {getattr(expected, name)}"
                    )
            if not _pair_close(row.difference_interval, expected.difference_interval):
                raise ValueError(f"{row.variant}: the difference interval is not the paired interval of its outcomes")
        return self
