"""The control block of a run result: the gate's verdict under an execution model, and how blocks written before
schema 1.2 are re-gated on reading."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vlabench.analysis.execution import Execution, ExecutionModel, Gate, gate


class ControlVerdict(BaseModel):
    """Whether the robot gets ``control_hz`` actions per second under the execution model (``cet.gate``), judged on
    p99 latency."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    control_hz: float
    execution: Execution = Field(description="per-step, sync or async")
    actions_per_chunk: int = Field(description="actions executed per inference: 1 per step, N when chunked")
    inference_hz_p50: float
    inference_hz_p99: float
    reaction_ms: float = Field(description="p99 latency: how stale the newest action can be")
    delivered_action_hz_p50: float = Field(description="actions the robot executes per second at p50 latency")
    delivered_action_hz_p99: float
    judged_on: str = Field(
        default="p99",
        description="the latency the gate judged: the upper end of p99's 95% interval, or the slowest sample when "
        "the samples are too few to bound p99 (the point p99 before schema 1.3)",
    )
    meets_target: bool
    reason: str | None = Field(description="why the target is missed (None when met)")
    regated_from: str | None = Field(
        default=None, description="the verdict a file older than schema 1.2 recorded, replaced on reading"
    )

    @classmethod
    def from_gate(cls, verdict: Gate, judged_on: str = "p99") -> ControlVerdict:
        return cls(
            control_hz=verdict.control_hz,
            execution=verdict.execution.mode,
            actions_per_chunk=verdict.execution.actions_per_inference,
            inference_hz_p50=verdict.inference_hz_p50,
            inference_hz_p99=verdict.inference_hz_p99,
            reaction_ms=verdict.reaction_ms,
            delivered_action_hz_p50=verdict.delivered_action_hz,
            delivered_action_hz_p99=verdict.delivered_action_hz_p99,
            meets_target=verdict.meets_target,
            reason=None if verdict.reason is None else f"{verdict.reason} (judged on {judged_on})",
            judged_on=judged_on,
        )

    def execution_model(self) -> ExecutionModel:
        """The execution model this verdict judged."""
        if self.execution == "per-step":
            return ExecutionModel()
        return ExecutionModel(mode=self.execution, actions_per_chunk=self.actions_per_chunk)

    def label(self) -> str:
        return self.execution_model().label()


def legacy_control(control: Any, explicit_actions: Any) -> Any:
    """A control block written before schema 1.2 (no ``execution``), re-gated under the model its run asked for:
    async at the workload's actions per chunk when ``--actions-per-chunk`` was given (the old rule, N actions per
    chunk / p99 latency >= the target, is the async rule, so the verdict stands), else per step, the paper's gate
    (the old default assumed all of the model's chunk executed, which nobody chose). The old verdict is kept in
    ``regated_from``. A block whose rates are not positive finite numbers is returned unchanged, for the reader to
    name the field."""
    if not isinstance(control, dict) or "execution" in control:
        return control
    rates = [control.get(name) for name in ("inference_hz_p50", "inference_hz_p99", "control_hz")]
    actions = control.get("actions_per_chunk")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in rates)
    if not numbers or min(rates) <= 0:
        return control
    valid_actions = isinstance(actions, int) and not isinstance(actions, bool) and actions > 0
    mode = "async" if explicit_actions is not None and valid_actions else "per-step"
    model = ExecutionModel(mode=mode, actions_per_chunk=actions if mode == "async" else 1)
    verdict = gate(1000.0 / rates[0], 1000.0 / rates[1], rates[2], model)
    old = "MEETS" if control.get("meets_target") else "MISSES"
    migrated = ControlVerdict.from_gate(verdict).model_dump()
    migrated["regated_from"] = (
        f"schema < 1.2: {control.get('action_hz_p99', float('nan')):.3g} actions/s at p99 assuming {actions} "
        f"actions executed per chunk, {old} the target"
    )
    if not valid_actions:
        migrated["actions_per_chunk"] = actions  # kept, so that the reader names control.actions_per_chunk
    return migrated
