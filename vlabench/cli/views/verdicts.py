"""The console's verdicts of a run: the control-rate gate and the whole feasibility gate, with the caveat the JSON
carries when the latency judged is not a bound on p99 (too few samples: the slowest sample)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from vlabench.analysis.cet import feasibility
from vlabench.measure.stats import CONFIDENCE
from vlabench.results.schema import RunResult

UPPER_END = f"the upper end of p99's {CONFIDENCE:.0%} interval"
"""``Stats.judged_p99``'s basis when the samples bound p99: no caveat."""


def control_line(result: RunResult) -> Group:
    """The control-rate gate: inference rate, reaction delay, execution model and delivered action rate, then MEETS
    or MISSES the target with the reason, judged on p99."""
    c = result.control
    delivered = f"; delivers {c.delivered_action_hz_p50:.3g} actions/s (p50)" if c.execution != "per-step" else ""
    verdict = ("MEETS", "bold green") if c.meets_target else ("MISSES", "bold red")
    whose = "the latency its robots saw" if result.serving else "end-to-end latency"
    lines = [
        Text.assemble(
            f"control    {c.inference_hz_p50:.3g} inferences/s (p50), {c.inference_hz_p99:.3g} (p99) of {whose}; "
            f"reaction delay {c.reaction_ms:.4g} ms (p99); execution {c.label()}{delivered} → ",
            verdict,
            f" the {c.control_hz:g} Hz target" + (f": {c.reason}" if c.reason else ""),
        )
    ]
    caveat = judged_caveat(c.judged_on)
    if caveat and c.meets_target:  # a missed target's reason already says what it was judged on
        lines.append(Text(f"           caveat: {caveat}", style="yellow"))
    if c.regated_from:
        lines.append(Text(f"           re-gated on reading ({c.regated_from})", style="dim"))
    return Group(*lines)


def judged_caveat(judged_on: str) -> str | None:
    """What a reader must know about the latency the gate judged: nothing when it is the upper end of p99's
    interval (or a point p99 recorded before intervals existed); else the reason it is not, as the JSON says."""
    return None if judged_on in ("p99", UPPER_END) else f"judged on {judged_on}"


def feasibility_line(result: RunResult) -> Text:
    """The whole gate: usable memory, the control gate under the run's execution model, correctness."""
    latency = result.robot_latency  # what the control block judged: a served run's robots' latency
    judged, judged_on = latency.judged_p99()
    _, reasons = feasibility(
        {
            "device_memory_gb": result.device.usable_gb(),
            "device_memory_nameplate_gb": result.device.memory_gb,
            "memory_needed_gb": result.memory.estimated_total_bytes / 1e9,
            "latency_p50_ms": latency.p50,
            "latency_p99_ms": judged,
            "valid": result.valid,
            "invalid_reason": result.invalid_reason,
        },
        result.control.control_hz,
        result.control.execution_model(),
    )
    caveat = judged_caveat(judged_on)
    met = "fits in usable memory and meets the target at p99" + (f" ({caveat})" if caveat else "")
    frozen = result.serving is not None and result.serving.freezes
    return Text.assemble(
        "feasible   ",
        ("yes", "bold green") if not reasons else ("no", "bold red"),
        f" ({'; '.join(reasons) or met})",
        ("; FROZEN: the server stalled while robots waited (see warnings)", "bold red") if frozen else "",
    )
