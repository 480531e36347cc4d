"""The projection model's parameters: per software stack, fitted on published latencies; per device, a host factor
from a hierarchical host model.

A phase takes ``floor + kernels × (dispatch_ms × host + kernel_gflop / peak)``: ``floor`` is the per-operator
roofline at the stack's achieved rates, the sum over operators of max(FLOPs / (peak × share), bytes / (bandwidth ×
bandwidth_share)) on the device's datasheet ceiling (``operator_mix``), ``kernels`` the phase's kernel count under
the stack's counting scheme (``kernel_counts``), ``dispatch_ms`` the stack's cost per kernel on the reference host,
``host`` the device's host factor (1 for stacks that replay captured graphs), and ``kernel_gflop / peak`` the
device-side time every kernel takes whatever its size, one global amount of work-equivalent per kernel.

Stacks are a hierarchy (``profiles/reported/stacks.yaml``): a stack's three parameters have a Gaussian prior
centred on its parent's (the first stack it ``borrows``; for its shares, the stack its kernels resemble where it
names one in ``shares_from``), so a stack with few entries stays near the stack it builds on and one with none takes
its parents' values; the root (eager PyTorch) has wide priors. A stack that keeps its activations in fp32
(``activation_precision``) runs its weightless operators at the device's fp32 peak (``projection_inputs``).

A device class reaches its own share of its datasheet whatever the stack: every stack's shares of peak and of
bandwidth move by the class's logit offset (a Jetson's shared LPDDR5 and power-managed clocks, a datacenter card's
HBM), centred on the reference class's (a desktop card, offset 0).

The host factor is never a device's own number: ``log host = class + launch path + core + slope × log(reference
clock / host CPU clock)``. Every class (datacenter server, desktop, Jetson, NPU, CPU) has an effect with a prior
centred on the reference class (a desktop host, effect 0): a datacenter card runs in a server whose CPU and driver
path are not a desktop's, so its class effect is fitted, never pinned. The launch path (CUDA, Intel's Level Zero,
Ascend's CANN, a CPU's own operators) and a board CPU's core and clock are covariates from the device profile. The
fit is a maximum a posteriori fit in log space (Levenberg-Marquardt with analytic derivatives) over every published
phase: an observation is one published latency (e2e, or a phase) and sums the terms of the phases it covers, each
with the stack that ran it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from vlabench.analysis.operator_mix import MixStack, OperatorMix
from vlabench.analysis.projection_stacks import get_stack, parent_stack, stacks
from vlabench.errors import unknown_name
from vlabench.hardware.devices import DeviceProfile

OBSERVATION_SIGMA = 0.2
"""Log-space noise of a published latency: the ±20% read-off uncertainty the sources state for the Fig. 2 rates."""

PRIORS: dict[str, tuple[float, float]] = {
    "share": (0.0, 1.5),  # logit of the achieved share of peak compute: centred on 50%, wide
    "bandwidth": (0.0, 1.5),  # logit of the achieved share of peak bandwidth: centred on 50%, wide
    "dispatch": (float(np.log(0.01)), 2.0),  # log ms per kernel: centred on 10 µs, the order of an eager launch
    "kernel": (float(np.log(0.1)), 2.0),  # log GFLOP-equivalent per kernel: 1 µs at 100 TFLOP/s, wide
    "path": (0.0, 1.0),  # log factor of a launch path other than CUDA's (Level Zero, CANN, a CPU's own ops)
    "core": (0.0, 1.0),  # log factor of a board CPU's core microarchitecture (its single-thread class)
    "slope": (1.0, 0.3),  # exponent of the clock ratio: launch cost is host time, about 1/clock
}
CHILD_SIGMA = {"share": 0.75, "bandwidth": 0.75, "dispatch": 1.0}
"""Prior standard deviation (logit or log) of a stack's parameter around its parent stack's."""
CLASS_PRIOR_SIGMA: dict[str, float | None] = {
    "desktop-gpu": None,  # the reference class: a desktop host, effect 0
    "datacenter-gpu": 0.5,  # a server's CPU and driver path: near a desktop's, fitted
    "jetson": 1.0,  # its own Arm CPU and Jetson Linux's driver: wide
    "npu": 1.0,
    "cpu": 1.0,
}
"""Prior standard deviation (log) of each device class's host effect, centred on the reference class (None: the
reference itself)."""
CLASS_SHARE_SIGMA = 1.0
"""Prior standard deviation (logit) of a device class's offset to every stack's achieved shares of peak and of
bandwidth, centred on the reference class's (a desktop card: offset 0)."""
CLASS_SHARE_KINDS = ("class share", "class bandwidth")
STACK_PARAMETERS = ("share", "bandwidth", "dispatch")
"""What each stack fits: its shares of peak compute and of peak bandwidth, and its cost per kernel."""
REFERENCE_PATH = "cuda"
REFERENCE_HOST_GHZ = 5.0
"""The reference host's maximum single-thread clock: a 2022-2024 desktop x86 CPU (i9-13900K 5.8 GHz, Ryzen 9 7950X
5.7, i7-13700K 5.4 boost clocks, vendor specifications; 5.0 rounds them down for the common non-K parts). Only the
clock ratio of a board CPU to it enters the model; a discrete card's host is its class's."""


@dataclass(frozen=True)
class HostTerms:
    """What a device's host factor is made of: its class, its launch path and its own CPU (if any)."""

    device_class: str
    launch_path: str
    core: str | None = None
    clock_ghz: float | None = None

    @property
    def clock_slowness(self) -> float:
        """log(reference clock / board CPU clock); 0 for a discrete card (its host is its class's)."""
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


@dataclass(frozen=True)
class Term:
    """One phase's share of an observation: the stack that ran it, its operators, its kernel count and the peak."""

    stack: str
    mix: OperatorMix
    kernels: int
    peak_tflops: float


@dataclass(frozen=True)
class Observation:
    """One published latency (e2e or a phase) with the terms of the phases it covers."""

    label: str
    group: str
    device: str
    host: HostTerms
    terms: tuple[Term, ...]
    observed_ms: float


class StackParameters(BaseModel):
    share_of_peak: float = Field(gt=0, le=1, description="of the datasheet peak compute, on compute-bound operators")
    share_of_bandwidth: float = Field(gt=0, le=1, description="of the datasheet bandwidth, on memory-bound operators")
    dispatch_us: float = Field(gt=0, description="per kernel, on the reference host")
    fitted_on: str = Field(description="the stack whose observations produced these values")
    observations: int = Field(description="published latencies of this stack's own the fit saw (0: its parent's)")


class HostModel(BaseModel):
    """log host factor = class effect + launch-path effect + core effect + slope × log(reference / board clock);
    an effect with no observation behind it stays at its prior mean, 0."""

    class_effects: dict[str, float]
    path_effects: dict[str, float]
    core_effects: dict[str, float]
    clock_slope: float

    def log_factor(self, terms: HostTerms) -> float:
        total = self.class_effects.get(terms.device_class, 0.0) + self.path_effects.get(terms.launch_path, 0.0)
        if terms.core is not None:
            total += self.core_effects.get(terms.core, 0.0) + self.clock_slope * terms.clock_slowness
        return total

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
        return float(np.exp(self.log_factor(terms))), (text or "the reference host") + note


class ClassShares(BaseModel):
    """Per device class, the logit offset of every stack's achieved share of peak and of bandwidth from the reference
    class's (a desktop card): a Jetson's shared LPDDR5 and power-managed clocks, a datacenter card's HBM. A class with
    no observation behind it stays at its prior mean, 0."""

    share_logit: dict[str, float]
    bandwidth_logit: dict[str, float]

    def apply(self, share: float, bandwidth: float, device_class: str | None) -> tuple[float, float]:
        """A stack's shares of peak and of bandwidth on a device of ``device_class`` (None: the reference's)."""
        return (
            _shifted(share, self.share_logit.get(device_class or "", 0.0)),
            _shifted(bandwidth, self.bandwidth_logit.get(device_class or "", 0.0)),
        )


def _shifted(share: float, logit: float) -> float:
    return float(_logistic(np.log(share / (1 - share)) + logit)) if share < 1 else share


class FittedParameters(BaseModel):
    """Per-stack parameters, the device classes' offsets to their shares, the host model, and what they were fitted
    on."""

    stacks: dict[str, StackParameters]
    kernel_gflop: float = Field(gt=0, description="device-side work-equivalent of one kernel: kernel_gflop / peak ms")
    class_shares: ClassShares
    hosts: HostModel
    host_factor: dict[str, float] = Field(description="the host factor of every observed device, from ``hosts``")
    observations: list[str]

    def for_stack(self, name: str) -> tuple[StackParameters, str]:
        """The stack's parameters and a sentence saying where they come from."""
        get_stack(name)
        if name not in self.stacks:
            raise unknown_name("fitted stack", name, self.stacks)
        found = self.stacks[name]
        if found.observations:
            return found, f"fitted on {found.observations} published latencies of its own"
        return found, f"no published latency of its own: its parent {found.fitted_on}'s, through the stack prior"

    def shares(self, stack: str, device_class: str | None) -> tuple[float, float]:
        """``stack``'s achieved shares of peak and of bandwidth on a device of ``device_class``."""
        own = self.stacks[stack]
        return self.class_shares.apply(own.share_of_peak, own.share_of_bandwidth, device_class)

    def host(self, terms: HostTerms) -> tuple[float, str]:
        """The host factor of a device with these terms (1 for the reference class on CUDA without a board CPU)."""
        return self.hosts.factor(terms)


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class _Design:
    """The parameter layout of one fit, its priors, and the observations' terms as arrays."""

    def __init__(self, observations: list[Observation]) -> None:
        names = list(stacks())
        self.stack_names = names
        index = {(kind, s): 3 * i + j for i, s in enumerate(names) for j, kind in enumerate(STACK_PARAMETERS)}
        index[("kernel", "")] = len(index)
        hosts = [o.host for o in observations]
        keys = sorted({("class", h.device_class) for h in hosts if CLASS_PRIOR_SIGMA[h.device_class] is not None})
        keys += sorted({("path", h.launch_path) for h in hosts if h.launch_path != REFERENCE_PATH})
        keys += sorted({("core", h.core) for h in hosts if h.core is not None})
        if any(h.core is not None for h in hosts):
            keys.append(("slope", ""))
        classes = sorted({h.device_class for h in hosts if CLASS_PRIOR_SIGMA[h.device_class] is not None})
        keys += [(kind, c) for kind in CLASS_SHARE_KINDS for c in classes]
        index |= {key: len(index) + i for i, key in enumerate(keys)}
        self.index = index
        self.size = len(index)
        terms = [(row, term) for row, o in enumerate(observations) for term in o.terms]
        self.rows = np.array([row for row, _ in terms])
        self.count = len(observations)
        self.mixes = MixStack.of([term.mix for _, term in terms])
        self.kernels = np.array([float(term.kernels) for _, term in terms])
        self.peak = np.array([term.peak_tflops for _, term in terms])
        self.share_i = np.array([index[("share", term.stack)] for _, term in terms])
        self.bandwidth_i = np.array([index[("bandwidth", term.stack)] for _, term in terms])
        none = self.size  # the index of a constant 0 appended to the parameters: the reference class's effect
        device_classes = [observations[row].host.device_class for row, _ in terms]
        self.class_share_i = np.array([index.get(("class share", c), none) for c in device_classes])
        self.class_bandwidth_i = np.array([index.get(("class bandwidth", c), none) for c in device_classes])
        self.dispatch_i = np.array([index[("dispatch", term.stack)] for _, term in terms])
        self.host_on = np.array([get_stack(term.stack).host_bound for _, term in terms])
        host_rows = np.zeros((len(terms), self.size))
        for position, (row, _) in enumerate(terms):
            host = observations[row].host
            for key in (("class", host.device_class), ("path", host.launch_path), ("core", host.core or "")):
                if key in index:
                    host_rows[position, index[key]] = 1.0
            if ("slope", "") in index:
                host_rows[position, index[("slope", "")]] = host.clock_slowness
        self.host_rows = host_rows
        self.observed = np.log([o.observed_ms for o in observations])

    def prior(self) -> tuple[np.ndarray, list[tuple[int, int | None, float, float]]]:
        """The starting point, and per parameter (its index, its parent's index or None, mean, sigma)."""
        start = np.zeros(self.size)
        rows: list[tuple[int, int | None, float, float]] = []
        for (kind, key), i in self.index.items():
            if kind in STACK_PARAMETERS:
                parent = parent_stack(key, kind)
                mean, sigma = PRIORS[kind]
                rows.append(
                    (i, self.index[(kind, parent)] if parent else None, mean, CHILD_SIGMA[kind] if parent else sigma)
                )
                start[i] = mean
            else:
                mean, sigma = (
                    (0.0, CLASS_PRIOR_SIGMA[key])
                    if kind == "class"
                    else (0.0, CLASS_SHARE_SIGMA)
                    if kind in CLASS_SHARE_KINDS
                    else PRIORS[kind]
                )
                rows.append((i, None, mean, sigma))
                start[i] = mean
        return start, rows

    def residuals_and_jacobian(self, x: np.ndarray, prior_rows) -> tuple[np.ndarray, np.ndarray]:
        padded = np.append(x, 0.0)
        share = _logistic(x[self.share_i] + padded[self.class_share_i])
        bandwidth = _logistic(x[self.bandwidth_i] + padded[self.class_bandwidth_i])
        compute, memory = self.mixes.parts(share, bandwidth)
        host = np.where(self.host_on, np.exp(self.host_rows @ x), 1.0)
        dispatch = self.kernels * np.exp(x[self.dispatch_i]) * host
        device_side = self.kernels * np.exp(x[self.index[("kernel", "")]]) / self.peak
        terms = compute + memory + device_side + dispatch
        predicted = np.bincount(self.rows, weights=terms, minlength=self.count)
        fit_rows = (np.log(predicted) - self.observed) / OBSERVATION_SIGMA
        jacobian_terms = np.zeros((terms.size, self.size))
        at = np.arange(terms.size)
        np.add.at(jacobian_terms, (at, self.share_i), -compute * (1 - share))
        np.add.at(jacobian_terms, (at, self.bandwidth_i), -memory * (1 - bandwidth))
        class_terms = np.zeros((terms.size, self.size + 1))
        np.add.at(class_terms, (at, self.class_share_i), -compute * (1 - share))
        np.add.at(class_terms, (at, self.class_bandwidth_i), -memory * (1 - bandwidth))
        jacobian_terms += class_terms[:, : self.size]
        np.add.at(jacobian_terms, (at, self.dispatch_i), dispatch)
        jacobian_terms[:, self.index[("kernel", "")]] += device_side
        jacobian_terms += (dispatch * self.host_on)[:, None] * self.host_rows
        jacobian = np.zeros((self.count, self.size))
        np.add.at(jacobian, self.rows, jacobian_terms)
        jacobian /= (predicted * OBSERVATION_SIGMA)[:, None]
        prior_residuals = np.empty(len(prior_rows))
        prior_jacobian = np.zeros((len(prior_rows), self.size))
        for row, (i, parent, mean, sigma) in enumerate(prior_rows):
            prior_residuals[row] = (x[i] - (x[parent] if parent is not None else mean)) / sigma
            prior_jacobian[row, i] = 1.0 / sigma
            if parent is not None:
                prior_jacobian[row, parent] = -1.0 / sigma
        return np.concatenate([fit_rows, prior_residuals]), np.vstack([jacobian, prior_jacobian])


def fit(observations: list[Observation]) -> FittedParameters:
    """MAP fit of every stack's shares and dispatch cost (hierarchical), the device-side time per kernel, and the
    host model's effects (class, launch path, core, clock slope) that the observations touch."""
    design = _Design(observations)
    start, prior_rows = design.prior()
    x = _levenberg_marquardt(lambda v: design.residuals_and_jacobian(v, prior_rows), start)
    index = design.index
    effects = {
        kind: {k: float(x[i]) for (group, k), i in index.items() if group == kind}
        for kind in (*PRIORS, "class", *CLASS_SHARE_KINDS)
    }
    hosts = HostModel(
        class_effects=effects["class"],
        path_effects=effects["path"],
        core_effects=effects["core"],
        clock_slope=float(x[index[("slope", "")]]) if ("slope", "") in index else PRIORS["slope"][0],
    )
    counts = {s: sum(any(t.stack == s for t in o.terms) for o in observations) for s in design.stack_names}
    return FittedParameters(
        stacks={
            s: StackParameters(
                share_of_peak=float(_logistic(x[index[("share", s)]])),
                share_of_bandwidth=float(_logistic(x[index[("bandwidth", s)]])),
                dispatch_us=float(np.exp(x[index[("dispatch", s)]]) * 1e3),
                fitted_on=s if counts[s] else _observed_ancestor(s, counts),
                observations=counts[s],
            )
            for s in design.stack_names
        },
        kernel_gflop=float(np.exp(x[index[("kernel", "")]])),
        class_shares=ClassShares(share_logit=effects["class share"], bandwidth_logit=effects["class bandwidth"]),
        hosts=hosts,
        host_factor={o.device: hosts.factor(o.host)[0] for o in sorted(observations, key=lambda o: o.device)},
        observations=[o.label for o in observations],
    )


def _observed_ancestor(name: str, counts: dict[str, int]) -> str:
    """The nearest ancestor stack with observations of its own (the root's prior if none)."""
    parent = parent_stack(name)
    while parent is not None and not counts[parent]:
        parent = parent_stack(parent)
    return parent or "the root prior"


def _levenberg_marquardt(residuals_and_jacobian, x: np.ndarray, iterations: int = 300) -> np.ndarray:
    """Minimize the sum of squared residuals (analytic Jacobian, adaptive damping)."""
    damping = 1e-3
    current, jacobian = residuals_and_jacobian(x)
    for _ in range(iterations):
        gradient, normal = jacobian.T @ current, jacobian.T @ jacobian
        while damping < 1e10:
            delta = -np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-9), gradient)
            trial, trial_jacobian = residuals_and_jacobian(x + delta)
            if trial @ trial < current @ current:
                x, current, jacobian, damping = x + delta, trial, trial_jacobian, max(damping / 3, 1e-9)
                break
            damping *= 4
        else:
            return x
        if np.abs(delta).max() < 1e-8:
            return x
    return x
