"""The projection model's parameters: per software stack, fitted on observed latencies; per device, a host factor
from a hierarchical host model.

A phase takes ``floor + kernels × (dispatch_ms × host + kernel_gflop / peak)``: ``floor`` is the per-operator
roofline at the stack's achieved rates, the sum over operators of max(FLOPs / (peak × share), bytes / (bandwidth ×
bandwidth_share)) on the device's datasheet ceiling (``operator_mix``), ``share`` and ``bandwidth_share`` the
stack's achieved shares of peak compute and of peak bandwidth, ``kernels`` the phase's kernel count under the
stack's counting
scheme (``kernel_counts``), ``dispatch_ms`` the stack's cost per kernel on the reference device's host, ``host``
the device's host factor (1 for stacks that replay captured graphs), and
``kernel_gflop / peak`` the device-side time every kernel takes whatever its size (ramp-up and tail of a launch
that never fills the device), one global amount of work-equivalent per kernel, so it is longer on a device with a
lower peak at the precision (GFLOP / TFLOP/s = ms).

The host factor is never one device's own number: ``log host = class + launch path + core + slope × log(reference
clock / board CPU clock)``. The class effect (datacenter GPU, desktop GPU, Jetson, NPU, CPU) pools every device of
the class under a prior centred on the reference class (desktop GPU, effect 0); the launch path (CUDA, Intel's
Level Zero, Ascend's CANN, a CPU's own operators) and the board CPU's core microarchitecture (its single-thread
class) and clock are covariates read from the device profile, fitted jointly. A discrete card has no board CPU: it
is projected in the reference host. A device with no entry of its own takes its class's and covariates' posterior;
an effect no entry touches stays at its prior mean (factor 1). The fit is a maximum a posteriori fit in log space
(Levenberg-Marquardt) with the stated priors; a stack with no observation of its own borrows the parameters of the
first stack in its ``borrows`` list that has some.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vlabench.analysis.operator_mix import MixStack, OperatorMix
from vlabench.errors import unknown_name
from vlabench.hardware.devices import DeviceProfile
from vlabench.yaml_data import load_packaged

OBSERVATION_SIGMA = 0.2
"""Log-space noise of an observed latency: the ±20% read-off uncertainty the sources state for the Fig. 2 rates."""
PRIORS: dict[str, tuple[float, float]] = {
    "share": (0.0, 1.5),  # logit of the achieved share of peak compute: centred on 50%, wide
    "bandwidth": (0.0, 1.5),  # logit of the achieved share of peak bandwidth: centred on 50%, wide
    "dispatch": (float(np.log(0.01)), 2.0),  # log ms per kernel: centred on 10 µs, the order of an eager launch
    "kernel": (float(np.log(0.1)), 2.0),  # log GFLOP-equivalent per kernel: 1 µs at 100 TFLOP/s, wide
    "path": (0.0, 1.0),  # log factor of a launch path other than CUDA's (Level Zero, CANN, a CPU's own ops)
    "core": (0.0, 1.0),  # log factor of a board CPU's core microarchitecture (its single-thread class)
    "slope": (1.0, 0.3),  # exponent of the clock ratio: launch cost is host time, about 1/clock
}
CLASS_PRIOR_SIGMA: dict[str, float | None] = {
    "desktop-gpu": None,  # the reference class: a discrete card in the reference desktop host, effect 0
    "datacenter-gpu": None,  # a discrete card too: projected in the same reference host (see below), effect 0
    "jetson": 1.0,  # its own Arm CPU and Jetson Linux's driver: wide
    "npu": 1.0,
    "cpu": 1.0,
}
"""Prior standard deviation (log) of each device class's host effect, centred on the reference class; None pins a
class to the reference host. A discrete GPU has no CPU of its own: its kernels are launched by whatever host it is
plugged into, so every discrete CUDA card is projected in one reference host and cards compare on their datasheets
(a server host's difference from a desktop one is not the card's, and is left to the stack's error band)."""
STACK_PARAMETERS = ("share", "bandwidth", "dispatch")
"""What each stack fits: its shares of peak compute and of peak bandwidth, and its cost per kernel."""
REFERENCE_PATH = "cuda"
REFERENCE_HOST_GHZ = 5.0
"""The reference host's maximum single-thread clock: a 2022-2024 desktop x86 CPU (i9-13900K 5.8 GHz, Ryzen 9 7950X
5.7, i7-13700K 5.4 boost clocks, vendor specifications; 5.0 rounds them down for the common non-K parts). Only the
clock ratio of a board CPU to it enters the model; a discrete card runs in the reference host (ratio 1)."""


@dataclass(frozen=True)
class HostTerms:
    """What a device's host factor is made of: its class, its launch path and its board CPU (if any)."""

    device_class: str
    launch_path: str
    core: str | None = None
    clock_ghz: float | None = None

    @property
    def clock_slowness(self) -> float:
        """log(reference clock / board CPU clock); 0 for a discrete card in the reference host."""
        return 0.0 if self.clock_ghz is None else float(np.log(REFERENCE_HOST_GHZ / self.clock_ghz))


def host_terms(profile: DeviceProfile) -> HostTerms:
    """A profile's host terms: its class, its torch device type as launch path, its board CPU's core and clock."""
    cpu = profile.host_cpu
    return HostTerms(
        device_class=profile.device_class,
        launch_path=profile.torch_device,
        core=cpu.core if cpu else None,
        clock_ghz=cpu.max_ghz if cpu else None,
    )


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
    host: HostTerms
    mix: OperatorMix
    kernels: int
    peak_tflops: float
    observed_ms: float


class StackParameters(BaseModel):
    share_of_peak: float = Field(gt=0, le=1, description="of the datasheet peak compute, on compute-bound operators")
    share_of_bandwidth: float = Field(gt=0, le=1, description="of the datasheet bandwidth, on memory-bound operators")
    dispatch_us: float = Field(gt=0, description="per kernel, on the reference device's host")
    fitted_on: str = Field(description="the stack whose observations produced these values")
    observations: int


class HostModel(BaseModel):
    """log host factor = class effect + launch-path effect + core effect + slope × log(reference / board clock);
    an effect with no observation behind it stays at its prior mean, 0."""

    class_effects: dict[str, float]
    path_effects: dict[str, float]
    core_effects: dict[str, float]
    clock_slope: float

    def factor(self, terms: HostTerms) -> tuple[float, str]:
        """The host factor of ``terms`` and a sentence saying what it is made of."""
        parts = [
            (f"{terms.device_class} class", self.class_effects.get(terms.device_class, 0.0)),
            (f"{terms.launch_path} launch path", self.path_effects.get(terms.launch_path, 0.0)),
        ]
        if terms.core is not None:
            parts.append((f"{terms.core} core", self.core_effects.get(terms.core, 0.0)))
            parts.append(
                (
                    f"clock ({REFERENCE_HOST_GHZ:g}/{terms.clock_ghz:g} GHz)^{self.clock_slope:.2f}",
                    self.clock_slope * terms.clock_slowness,
                )
            )
        unfitted = [
            name
            for name, table, key in (
                ("class", self.class_effects, terms.device_class),
                ("core", self.core_effects, terms.core),
            )
            if key is not None and key not in table and not (name == "class" and CLASS_PRIOR_SIGMA[key] is None)
        ]
        text = " × ".join(f"{label} {np.exp(value):.3g}" for label, value in parts if value != 0.0)
        note = f"; no entry for its {' or '.join(unfitted)}: the prior's 1" if unfitted else ""
        return float(np.exp(sum(value for _, value in parts))), (text or "the reference host") + note


class FittedParameters(BaseModel):
    """Per-stack parameters, the host model, and what they were fitted on."""

    stacks: dict[str, StackParameters]
    kernel_gflop: float = Field(gt=0, description="device-side work-equivalent of one kernel: kernel_gflop / peak ms")
    hosts: HostModel
    host_factor: dict[str, float] = Field(description="the host factor of every observed device, from ``hosts``")
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

    def host(self, terms: HostTerms) -> tuple[float, str]:
        """The host factor of a device with these terms (1 for the reference class on CUDA without a board CPU)."""
        return self.hosts.factor(terms)


def _host_index(observations: list[Observation], start: int) -> dict[tuple[str, str], int]:
    """Parameter positions of the host model's effects that some observation has, from ``start``."""
    keys = sorted({("class", o.host.device_class) for o in observations if CLASS_PRIOR_SIGMA[o.host.device_class]})
    keys += sorted({("path", o.host.launch_path) for o in observations if o.host.launch_path != REFERENCE_PATH})
    keys += sorted({("core", o.host.core) for o in observations if o.host.core is not None})
    if any(o.host.core is not None for o in observations):
        keys.append(("slope", ""))
    return {key: start + i for i, key in enumerate(keys)}


def _prior(key: tuple[str, str]) -> tuple[float, float]:
    if key[0] == "class":
        sigma = CLASS_PRIOR_SIGMA[key[1]]
        assert sigma is not None
        return 0.0, sigma
    return PRIORS[key[0]]


def fit(observations: list[Observation]) -> FittedParameters:
    """MAP fit of every observed stack's shares and dispatch cost, the device-side time per kernel, and the host
    model's effects (class, launch path, core, clock slope) that the observations touch."""
    stack_names = sorted({o.stack for o in observations})
    index = {(kind, s): 3 * i + j for i, s in enumerate(stack_names) for j, kind in enumerate(STACK_PARAMETERS)}
    index[("kernel", "")] = len(index)
    index |= _host_index(observations, len(index))
    ordered = sorted(index, key=index.get)
    prior_mean = np.array([_prior(key)[0] for key in ordered])
    prior_sigma = np.array([_prior(key)[1] for key in ordered])
    share_i = np.array([index[("share", o.stack)] for o in observations])
    bandwidth_i = np.array([index[("bandwidth", o.stack)] for o in observations])
    dispatch_i = np.array([index[("dispatch", o.stack)] for o in observations])
    kernel_i = index[("kernel", "")]
    host_rows = np.zeros((len(observations), len(index)))
    for row, o in enumerate(observations):
        for key in (("class", o.host.device_class), ("path", o.host.launch_path), ("core", o.host.core or "")):
            if key in index:
                host_rows[row, index[key]] = 1.0
        if ("slope", "") in index:
            host_rows[row, index[("slope", "")]] = o.host.clock_slowness
    host_on = np.array([get_stack(o.stack).host_bound for o in observations])
    mixes = MixStack.of([o.mix for o in observations])
    kernels = np.array([float(o.kernels) for o in observations])
    peak = np.array([o.peak_tflops for o in observations])
    observed = np.log([o.observed_ms for o in observations])

    def residuals(x: np.ndarray) -> np.ndarray:
        floor = mixes.floors(_logistic(x[share_i]), _logistic(x[bandwidth_i]))
        host = np.where(host_on, np.exp(host_rows @ x), 1.0)
        predicted = floor + kernels * (np.exp(x[dispatch_i]) * host + np.exp(x[kernel_i]) / peak)
        return np.concatenate([(np.log(predicted) - observed) / OBSERVATION_SIGMA, (x - prior_mean) / prior_sigma])

    x = _levenberg_marquardt(residuals, prior_mean.copy())
    effects = {
        kind: {k: float(x[i]) for (group, k), i in index.items() if group == kind} for kind in (*PRIORS, "class")
    }
    hosts = HostModel(
        class_effects=effects["class"],
        path_effects=effects["path"],
        core_effects=effects["core"],
        clock_slope=float(x[index[("slope", "")]]) if ("slope", "") in index else PRIORS["slope"][0],
    )
    return FittedParameters(
        stacks={
            s: StackParameters(
                share_of_peak=float(_logistic(x[index[("share", s)]])),
                share_of_bandwidth=float(_logistic(x[index[("bandwidth", s)]])),
                dispatch_us=float(np.exp(x[index[("dispatch", s)]]) * 1e3),
                fitted_on=s,
                observations=sum(o.stack == s for o in observations),
            )
            for s in stack_names
        },
        kernel_gflop=float(np.exp(x[kernel_i])),
        hosts=hosts,
        host_factor={o.device: hosts.factor(o.host)[0] for o in sorted(observations, key=lambda o: o.device)},
        observations=[o.label for o in observations],
    )


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


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
