"""``--precision auto``: probe every precision the backend declares and the hardware runs natively with a short
correctness-gated run, and keep the fastest that passes (fp32, the reference path, is always probed)."""

from __future__ import annotations

import statistics

import torch
from pydantic import BaseModel, ConfigDict, Field

from vlabench.commands.run.execution import ReferenceCache
from vlabench.commands.run.plan import RunPlan
from vlabench.commands.run.prepare import prepare_contender
from vlabench.errors import VlabenchError
from vlabench.hardware.detection import INT8_DOT_FLAGS, NATIVE_BF16_FLAGS, NATIVE_FP16_FLAGS, read_cpu_flags
from vlabench.measure.correctness import TOLERANCES, compare, needs_reference
from vlabench.measure.policy import PreparedPolicy
from vlabench.measure.timing import RunnerSettings, measure_interleaved, plain_inference
from vlabench.vocab import Precision

NATIVE_INT8_FLAGS = INT8_DOT_FLAGS | {"avx2"}
CPU_FLAGS = {"bf16": NATIVE_BF16_FLAGS, "fp16": NATIVE_FP16_FLAGS, "int8": NATIVE_INT8_FLAGS, "int4": NATIVE_INT8_FLAGS}
"""The CPU flags under which a precision's matrix products run in hardware (int4 weights are unpacked to int8
operands; AVX2's int8 product is VPMADDUBSW, which every int8 runtime here uses on such CPUs); without them the
runtime emulates it, slower than fp32."""
EMULATED_ON_EVERY_CPU = {
    "fp8": "not native on this CPU: no CPU computes fp8; its weights are dequantized to bf16 in each linear (emulated)"
}
PROBE_ITERATIONS = 3
MARGIN = 0.05
"""A less precise candidate must be more than this much faster than a more precise passing one to be chosen."""


class ProbedPrecision(BaseModel):
    """One candidate of the probe: its end-to-end p50 over the probe's inferences and the gate's verdict."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    precision: str
    e2e_p50_ms: float | None = Field(default=None, description="None: not timed (skipped)")
    gate: str = Field(description="passed, failed, reference (the exact path itself) or skipped")
    relative_error: float | None = None
    note: str = ""


class PrecisionChoice(BaseModel):
    """What ``--precision auto`` chose for one backend on one device, and why."""

    chosen: str
    reason: str
    probe: str
    candidates: list[ProbedPrecision]


def native_reason(precision: str, engine: str, flags: set[str] | None = None) -> str | None:
    """None when ``engine`` computes ``precision`` natively here, else why not. Off the CPU, what a backend
    declares for its device is taken as native (CUDA bf16 is checked)."""
    if precision == Precision.REFERENCE:
        return None
    if engine == "cuda":
        if precision == "bf16" and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
            return "this GPU has no native bf16"
        return None
    if engine != "cpu":
        return None
    if precision in EMULATED_ON_EVERY_CPU:
        return EMULATED_ON_EVERY_CPU[precision]
    needed = CPU_FLAGS.get(precision, frozenset())
    have = read_cpu_flags() if flags is None else flags
    if needed & have:
        return None
    return f"not native on this CPU (none of {', '.join(sorted(needed))}): emulated, slower than fp32"


def candidates(plan: RunPlan, flags: set[str] | None = None) -> tuple[list[str], list[ProbedPrecision]]:
    """The precisions to probe (fp32 first, then the backend's others in ``Precision.NAMES`` order) and the
    declared ones left out, each with why."""
    declared = plan.backend.precisions(plan.device.torch_device)
    probe, skipped = [], []
    for precision in (p for p in Precision.NAMES if p in declared or p == Precision.REFERENCE):
        reason = native_reason(precision, plan.engine, flags)
        if reason is None and precision not in TOLERANCES:
            reason = "the correctness gate has no tolerance for it yet"
        if reason is None:
            probe.append(precision)
        else:
            skipped.append(ProbedPrecision(precision=precision, gate="skipped", note=reason))
    return probe, skipped


def pick(probed: list[ProbedPrecision]) -> tuple[str, str]:
    """The fastest passing candidate unless a more precise passing one is within ``MARGIN`` of it; and why."""
    order = {name: i for i, name in enumerate(Precision.NAMES)}
    passing = [c for c in probed if c.gate in ("passed", "reference") and c.e2e_p50_ms is not None]
    if not passing:
        return Precision.REFERENCE, "no candidate passed the correctness gate: fp32, the reference precision"
    fastest = min(passing, key=lambda c: c.e2e_p50_ms)
    close = [c for c in passing if c.e2e_p50_ms <= fastest.e2e_p50_ms * (1 + MARGIN)]
    best = min(close, key=lambda c: order[c.precision])
    if best is not fastest:
        return best.precision, (
            f"within {MARGIN:.0%} of the fastest ({fastest.precision}, {fastest.e2e_p50_ms:.1f} ms) at higher precision"
        )
    others = [c for c in passing if c is not best]
    if not others:
        return best.precision, "the only candidate that passed the correctness gate"
    runner_up = min(others, key=lambda c: c.e2e_p50_ms)
    speedup = runner_up.e2e_p50_ms / best.e2e_p50_ms
    return (
        best.precision,
        f"the fastest that passed the gate, {speedup:.2f}x as fast as the next, {runner_up.precision}",
    )


def describe(backend: str, choice: PrecisionChoice) -> str:
    """One line: the choice, why, and every candidate's p50 and gate verdict."""
    shown = []
    for c in choice.candidates:
        if c.e2e_p50_ms is None:
            shown.append(f"{c.precision} skipped ({c.note})")
        else:
            error = f", error {c.relative_error:.2e}" if c.relative_error is not None else ""
            shown.append(f"{c.precision} {c.e2e_p50_ms:.1f} ms ({c.gate}{error})")
    return f"{backend}: precision auto → {choice.chosen} ({choice.reason}); probed {'; '.join(shown)}"


def choose_precision(plan: RunPlan) -> tuple[RunPlan, PrecisionChoice, PreparedPolicy | None]:
    """Probe ``plan`` (planned with ``--precision auto``) at each candidate; the plan at the chosen precision, the
    choice, and the policy prepared for it (reused by the run). At most two models are held at once."""
    probe, probed = candidates(plan)
    references = ReferenceCache(plan, plan.device.torch_device)
    best: tuple[float, PreparedPolicy] | None = None
    kept: dict[str, PreparedPolicy] = {}
    for precision in probe:
        candidate = plan.at(precision=precision)
        try:
            contender = prepare_contender(candidate)
        except VlabenchError as exc:
            probed.append(ProbedPrecision(precision=precision, gate="skipped", note=str(exc)))
            continue
        policy = contender.policy
        settings = RunnerSettings(1, PROBE_ITERATIONS, 0.0, PROBE_ITERATIONS)
        measured = measure_interleaved([contender], settings)[0]
        p50 = statistics.median(measured.samples_ms["e2e_unsynced"])
        entry = ProbedPrecision(precision=precision, e2e_p50_ms=p50, gate="reference")
        if needs_reference(plan.backend.is_reference, precision):
            obs, noise = contender.inputs[0]
            actions = plain_inference(policy, contender.loop, obs, noise)
            choice = references.choice
            verdict = compare(
                actions, references.get(plan.schedule), noise, precision, choice.precision, plan.spec, choice.reason
            )
            entry.gate, entry.relative_error = ("passed" if verdict.passed else "failed"), verdict.relative_error
        probed.append(entry)
        if entry.gate != "failed" and (best is None or p50 < best[0]):
            best, kept = (p50, policy), {precision: policy}
        del policy
    chosen, reason = pick(probed)
    order = {name: i for i, name in enumerate(Precision.NAMES)}
    probed.sort(key=lambda c: order[c.precision])
    probe_text = (
        f"1 warm-up + {PROBE_ITERATIONS} timed inferences per candidate, sequentially, as a run times them "
        "(p50 of the unsynchronized ones); gated against the run's reference"
    )
    choice = PrecisionChoice(chosen=chosen, reason=reason, probe=probe_text, candidates=probed)
    return plan.at(precision=chosen), choice, kept.get(chosen)
