"""The execution model and the control-rate gate (README and docs/measurement.md: "The control-rate gate").

The formulas are mirrored in JavaScript by the leaderboard site; change both together."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Execution = Literal["per-step", "sync", "async"]
EXECUTIONS: tuple[str, ...] = ("per-step", "sync", "async")


class ExecutionModel(BaseModel):
    """How the robot consumes a policy's outputs (README: "The control-rate gate").

    ``per-step`` (the paper's gate, the default): one inference per control step, one action executed from each.
    ``sync``: the robot executes ``actions_per_chunk`` actions at the control rate, then waits for the next
    inference. ``async``: the next inference runs while the current chunk executes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Execution = "per-step"
    actions_per_chunk: int = Field(default=1, ge=1)

    def label(self) -> str:
        return "per-step" if self.mode == "per-step" else f"{self.mode}, {self.actions_per_chunk} actions per chunk"

    @property
    def actions_per_inference(self) -> int:
        return 1 if self.mode == "per-step" else self.actions_per_chunk


class Gate(BaseModel):
    """The control-rate verdict of one latency distribution under one execution model."""

    model_config = ConfigDict(frozen=True)

    execution: ExecutionModel
    control_hz: float
    inference_hz_p50: float
    inference_hz_p99: float
    reaction_ms: float = Field(description="p99 latency: how stale the newest action can be")
    delivered_action_hz: float = Field(description="actions the robot executes per second, at p50 latency")
    delivered_action_hz_p99: float
    meets_target: bool
    reason: str | None = Field(description="why the target is missed (None when met)")


def delivered_hz(latency_ms: float, control_hz: float, execution: ExecutionModel) -> float:
    """Actions per second the robot executes when an inference takes ``latency_ms``."""
    seconds = latency_ms / 1000.0
    n = execution.actions_per_chunk
    if execution.mode == "per-step":
        return min(control_hz, 1.0 / seconds)
    if execution.mode == "sync":
        return n / (n / control_hz + seconds)
    return min(control_hz, n / seconds)


def gate(latency_p50_ms: float, latency_p99_ms: float, control_hz: float, execution: ExecutionModel) -> Gate:
    """Per-step: the inference rate at p99 must reach ``control_hz``. Sync: the robot pauses for every inference,
    so a chunk may cost at most one control period of waiting (p99 latency <= 1 / control_hz); its delivered rate
    is N / (N / control_hz + latency). Async: the next chunk must be ready before the current one runs out
    (p99 latency <= N / control_hz)."""
    period_ms = 1000.0 / control_hz
    budget_ms = period_ms * (execution.actions_per_chunk if execution.mode == "async" else 1)
    meets = latency_p99_ms <= budget_ms
    reason = None
    if not meets:
        what = {
            "per-step": f"{1000.0 / latency_p99_ms:.3g} inferences/s at p99 < {control_hz:g} Hz",
            "sync": f"p99 latency {latency_p99_ms:.4g} ms pauses the robot longer than one control period "
            f"({period_ms:.4g} ms) per chunk",
            "async": f"p99 latency {latency_p99_ms:.4g} ms > the chunk's {execution.actions_per_chunk} actions "
            f"at {control_hz:g} Hz ({budget_ms:.4g} ms)",
        }
        reason = what[execution.mode]
    return Gate(
        execution=execution,
        control_hz=control_hz,
        inference_hz_p50=1000.0 / latency_p50_ms,
        inference_hz_p99=1000.0 / latency_p99_ms,
        reaction_ms=latency_p99_ms,
        delivered_action_hz=delivered_hz(latency_p50_ms, control_hz, execution),
        delivered_action_hz_p99=delivered_hz(latency_p99_ms, control_hz, execution),
        meets_target=meets,
        reason=reason,
    )
