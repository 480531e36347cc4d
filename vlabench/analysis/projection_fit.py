"""The projection model's parameters: per software stack, fitted on observed latencies; per device, a host factor.

A phase takes ``roofline_ms / share + kernels × (dispatch_ms × host + kernel_gflop / peak)``: ``roofline_ms`` is
the per-operator roofline floor (the sum of max(FLOPs/peak, bytes/bandwidth) on the device's datasheet ceiling),
``share`` the stack's achieved share of peak, ``kernels`` the phase's kernel count under the stack's counting
scheme (``kernel_counts``), ``dispatch_ms`` the stack's cost per kernel on the reference device's host, ``host``
the device's host factor (1 on the reference device; 1 for stacks that replay captured graphs), and
``kernel_gflop / peak`` the device-side time every kernel takes whatever its size (ramp-up and tail of a launch
that never fills the device), one global amount of work-equivalent per kernel, so it is longer on a device with a
lower peak at the precision (GFLOP / TFLOP/s = ms). The fit is a maximum a
posteriori fit in log space (Levenberg-Marquardt) with the stated priors; a stack with no observation of its own
borrows the parameters of the first stack in its ``borrows`` list that has some.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vlabench.errors import unknown_name
from vlabench.yaml_data import load_packaged

REFERENCE_DEVICE = "rtx-4090"
"""The device whose host factor is 1 by definition: the one with the most published entries (a desktop x86 host)."""
OBSERVATION_SIGMA = 0.2
"""Log-space noise of an observed latency: the ±20% read-off uncertainty the sources state for the Fig. 2 rates."""
PRIORS: dict[str, tuple[float, float]] = {
    "share": (0.0, 1.5),  # logit of the achieved share of peak: centred on 50%, wide
    "dispatch": (float(np.log(0.01)), 2.0),  # log ms per kernel: centred on 10 µs, the order of an eager launch
    "host": (0.0, 1.5),  # log host factor: centred on the reference host
    "kernel": (float(np.log(0.1)), 2.0),  # log GFLOP-equivalent per kernel: 1 µs at 100 TFLOP/s, wide
}


class Stack(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    backend: str | None = Field(description="the vlabench backend that runs this stack (None: scoring only)")
    kernel_scheme: Literal["eager", "fused"]
    host_bound: bool = Field(description="per-kernel cost is host time, so it scales with the device's host")
    borrows: list[str] = Field(description="stacks whose parameters this one uses when it has no observation")
    rationale: str


class Stacks(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    stacks: list[Stack]


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


@dataclass(frozen=True)
class Observation:
    """One observed end-to-end latency with the model inputs of its (model, device, stack, precision)."""

    label: str
    stack: str
    device: str
    device_kind: str
    roofline_ms: float
    kernels: int
    peak_tflops: float
    observed_ms: float


class StackParameters(BaseModel):
    share_of_peak: float = Field(gt=0, le=1)
    dispatch_us: float = Field(gt=0, description="per kernel, on the reference device's host")
    fitted_on: str = Field(description="the stack whose observations produced these values")
    observations: int


class FittedParameters(BaseModel):
    """Per-stack and per-device parameters and what they were fitted on."""

    stacks: dict[str, StackParameters]
    kernel_gflop: float = Field(gt=0, description="device-side work-equivalent of one kernel: kernel_gflop / peak ms")
    host_factor: dict[str, float]
    device_kinds: dict[str, str]
    observations: list[str]

    def for_stack(self, name: str) -> tuple[StackParameters, str]:
        """The stack's parameters (its own, else borrowed) and a sentence saying which."""
        stack = get_stack(name)
        for candidate in (name, *stack.borrows):
            if candidate in self.stacks:
                found = self.stacks[candidate]
                how = "fitted" if candidate == name else f"borrowed from {candidate} (no entry of its own)"
                return found, f"{how} on {found.observations} observed latencies"
        raise unknown_name("fitted stack", name, self.stacks)

    def host(self, device: str, kind: str) -> tuple[float, str]:
        """The device's host factor: fitted, else the median over fitted devices of the same kind, else 1."""
        if device == REFERENCE_DEVICE:
            return 1.0, "reference device"
        if device in self.host_factor:
            return self.host_factor[device], "fitted"
        same = [v for d, v in self.host_factor.items() if self.device_kinds.get(d) == kind]
        if same:
            return float(statistics.median(same)), f"median of {len(same)} fitted {kind} device(s)"
        return 1.0, f"no fitted {kind} device: the reference host"


def fit(observations: list[Observation]) -> FittedParameters:
    """MAP fit of every observed stack's share and dispatch cost and every observed device's host factor."""
    stack_names = sorted({o.stack for o in observations})
    devices = sorted({o.device for o in observations if o.device != REFERENCE_DEVICE})
    index = {("share", s): 2 * i for i, s in enumerate(stack_names)}
    index |= {("dispatch", s): 2 * i + 1 for i, s in enumerate(stack_names)}
    index |= {("host", d): 2 * len(stack_names) + i for i, d in enumerate(devices)}
    index[("kernel", "")] = len(index)
    prior_mean = np.array([PRIORS[key[0]][0] for key in sorted(index, key=index.get)])
    prior_sigma = np.array([PRIORS[key[0]][1] for key in sorted(index, key=index.get)])
    share_i = np.array([index[("share", o.stack)] for o in observations])
    dispatch_i = np.array([index[("dispatch", o.stack)] for o in observations])
    host_i = np.array([index.get(("host", o.device), -1) for o in observations])
    host_on = np.array([get_stack(o.stack).host_bound and o.device != REFERENCE_DEVICE for o in observations])
    roofline = np.array([o.roofline_ms for o in observations])
    kernels = np.array([float(o.kernels) for o in observations])
    peak = np.array([o.peak_tflops for o in observations])
    kernel_i = index[("kernel", "")]
    observed = np.log([o.observed_ms for o in observations])

    def residuals(x: np.ndarray) -> np.ndarray:
        share = 1.0 / (1.0 + np.exp(-x[share_i]))
        host = np.where(host_on, np.exp(x[host_i]), 1.0)
        predicted = roofline / share + kernels * (np.exp(x[dispatch_i]) * host + np.exp(x[kernel_i]) / peak)
        return np.concatenate([(np.log(predicted) - observed) / OBSERVATION_SIGMA, (x - prior_mean) / prior_sigma])

    x = _levenberg_marquardt(residuals, prior_mean.copy())
    return FittedParameters(
        stacks={
            s: StackParameters(
                share_of_peak=float(1.0 / (1.0 + np.exp(-x[index[("share", s)]]))),
                dispatch_us=float(np.exp(x[index[("dispatch", s)]]) * 1e3),
                fitted_on=s,
                observations=sum(o.stack == s for o in observations),
            )
            for s in stack_names
        },
        kernel_gflop=float(np.exp(x[kernel_i])),
        host_factor={d: float(np.exp(x[index[("host", d)]])) for d in devices},
        device_kinds={o.device: o.device_kind for o in observations},
        observations=[o.label for o in observations],
    )


def _levenberg_marquardt(residuals, x: np.ndarray, iterations: int = 200) -> np.ndarray:
    """Minimize the sum of squared residuals (numerical Jacobian, adaptive damping)."""
    damping = 1e-2
    current = residuals(x)
    for _ in range(iterations):
        jacobian = np.empty((current.size, x.size))
        for j in range(x.size):
            step = np.zeros_like(x)
            step[j] = 1e-6
            jacobian[:, j] = (residuals(x + step) - current) / 1e-6
        gradient, normal = jacobian.T @ current, jacobian.T @ jacobian
        while damping < 1e10:
            delta = -np.linalg.solve(normal + damping * np.eye(x.size), gradient)
            trial = residuals(x + delta)
            if trial @ trial < current @ current:
                x, current, damping = x + delta, trial, damping / 3
                break
            damping *= 4
        else:
            return x
        if np.abs(delta).max() < 1e-8:
            return x
    return x
