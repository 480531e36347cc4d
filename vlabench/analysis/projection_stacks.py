"""Software stacks as data (``profiles/reported/stacks.yaml``): how each counts and launches its kernels, and which
stacks centre its parameters' priors in the projection model's fit (``projection_fit``)."""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vlabench.errors import unknown_name
from vlabench.yaml_data import load_packaged


class Stack(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    backend: str | None = Field(description="the vlabench backend that runs this stack (None: scoring only)")
    kernel_scheme: Literal["eager", "fused"]
    host_bound: bool = Field(description="per-kernel cost is host time, so it scales with the device's host")
    borrows: list[str] = Field(description="its parent stacks, nearest first: its prior is centred on the first")
    shares_from: str | None = Field(
        default=None,
        description="the stack whose kernels it resembles: its achieved shares of peak and bandwidth centre this "
        "stack's (None: its parent's, like its cost per kernel)",
    )
    activation_precision: Literal["fp32"] | None = Field(
        default=None,
        description="the precision its weightless operators (attention scores and values) run at, on activations of "
        "that width, whatever the weights' precision (None: the run's precision)",
    )
    rationale: str


class Stacks(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    stacks: list[Stack]

    @model_validator(mode="after")
    def _parents_are_stacks(self) -> Stacks:
        names = {s.name for s in self.stacks}
        for stack in self.stacks:
            for parent in (*stack.borrows, *([stack.shares_from] if stack.shares_from else [])):
                if parent not in names or parent == stack.name:
                    raise ValueError(f"stack {stack.name} borrows from {parent!r}, which is not another stack here")
        return self


@cache
def stacks() -> dict[str, Stack]:
    """The stacks of ``profiles/reported/stacks.yaml``, by name."""
    return {s.name: s for s in load_packaged("reported", "stacks", Stacks, "software stacks").stacks}


def get_stack(name: str) -> Stack:
    known = stacks()
    if name not in known:
        raise unknown_name("stack", name, known)
    return known[name]


def stack_for_backend(backend: str) -> Stack | None:
    return next((s for s in stacks().values() if s.backend == backend), None)


def parent_stack(name: str, parameter: str = "dispatch") -> str | None:
    """The stack whose ``parameter`` (share, bandwidth or dispatch) centres ``name``'s prior (None: a root): its
    ``shares_from`` for the shares where it names one, else its first ``borrows``."""
    stack = get_stack(name)
    if parameter in ("share", "bandwidth") and stack.shares_from is not None:
        return stack.shares_from
    return stack.borrows[0] if stack.borrows else None
