"""The timed pass's relations: every phase counts the same inferences, its statistics are those of its samples, parts
lie within the whole, the prefix is vision + prefill, the action phase holds its steps, and the inferences fit in
the timed duration."""

from __future__ import annotations

import math
import re

from vlabench.results.relation_terms import ABSOLUTE_MS, RELATIVE, Problems, RunResult, at_most
from vlabench.results.stats_relations import ORDER_STATISTICS, sample_problems
from vlabench.vocab import Phase

LOOP_OVERHEAD = 2.0
"""The action phase may exceed its steps' sum by this factor (plus 10 ms): the loop's own work between steps."""
STEP_SPAN = re.compile(r"denoise_step\[(\d{1,6})\]")
PARTS = ("preprocess", "vision", "prefill", "prefix", "action", "postprocess")
"""Phases timed inside each end-to-end inference."""


def count_relations(result: RunResult) -> Problems:
    """Every phase is timed once per timed inference (the pooled denoising step once per step of each); each step's
    samples are those of its statistics."""
    timing, found = result.timing, []
    steps = timing.denoise_steps
    for name, stats in timing.phases.items():
        expected = sum(step.count for step in steps) if name == Phase.DENOISE_STEP and steps else timing.iterations
        if (name != Phase.DENOISE_STEP or steps) and stats.count != expected:
            found.append(
                (
                    f"timing.phases.{name}.count",
                    f"equal sample counts: {name} counts {stats.count} samples, the pass "
                    f"{expected} ({timing.iterations} timed inferences)",
                )
            )
    for index, step in enumerate(steps):
        if step.count != timing.iterations:
            found.append(
                (
                    f"timing.denoise_steps.{index}.count",
                    f"equal sample counts: step {index} counts {step.count} samples, the pass {timing.iterations}",
                )
            )
    return found


def sample_relations(result: RunResult) -> Problems:
    """The recorded samples of a phase, and of each denoising step in order, are the ones its statistics summarize."""
    timing, found = result.timing, []
    spans = step_spans(timing.samples_ms)
    pairs = enumerate(zip(spans, timing.denoise_steps, strict=False))
    steps = [(f"timing.denoise_steps.{i}", stats, timing.samples_ms[key]) for i, (key, stats) in pairs]
    named = [
        (f"timing.samples_ms.{name}", timing.phases.get(name), values) for name, values in timing.samples_ms.items()
    ]
    for field, stats, samples in named + steps:
        if stats is None or not samples or not all(map(math.isfinite, samples)):
            continue
        found += sample_problems(field, stats, samples)
    if timing.denoise_steps and spans and len(spans) != len(timing.denoise_steps):
        found.append(
            (
                "timing.denoise_steps",
                f"statistics of the samples: {len(timing.denoise_steps)} steps' statistics, samples of {len(spans)}",
            )
        )
    return found


def step_spans(samples_ms: dict[str, list[float]]) -> list[str]:
    """The per-step span names among the samples (``denoise_step[i]``), in step order."""
    numbered = [(int(found.group(1)), key) for key in samples_ms if (found := STEP_SPAN.fullmatch(key))]
    return [key for _, key in sorted(numbered)]


def phase_relations(result: RunResult) -> Problems:
    """Parts within the whole, percentile by percentile (each iteration's part lies inside its whole, and order
    statistics keep that); the prefix holds vision and prefill (it may exceed them by the work between their spans,
    longer when the process is preempted there); the action phase holds its steps."""
    phases, found = result.timing.phases, []
    e2e = phases.get("e2e")
    for name in PARTS:
        part = phases.get(name)
        if e2e is None or part is None:
            continue
        for stat in ORDER_STATISTICS:
            inner, outer = getattr(part, stat), getattr(e2e, stat)
            if inner > outer * (1 + 1e-9) + 1e-6:
                found.append(
                    (
                        f"timing.phases.{name}.{stat}",
                        f"part within the whole: {name} {stat} {inner:g} ms is longer than the end-to-end {stat} "
                        f"{outer:g} ms that contains it",
                    )
                )
                break
    vision, prefill, prefix = phases.get("vision"), phases.get("prefill"), phases.get("prefix")
    parts = vision.mean + prefill.mean if vision and prefill else None
    if parts is not None and prefix and not at_most(parts, prefix.mean, ABSOLUTE_MS):
        found.append(
            (
                "timing.phases.prefix.mean",
                f"prefix = vision + prefill: {vision.mean:g} + {prefill.mean:g} ms do not fit in a prefix of "
                f"{prefix.mean:g} ms",
            )
        )
    action, steps = phases.get("action"), result.timing.denoise_steps
    if action and steps:
        total = sum(step.mean for step in steps)
        if total > action.mean * (1 + RELATIVE) + ABSOLUTE_MS * len(steps):
            found.append(
                (
                    "timing.denoise_steps",
                    f"action = its steps: {len(steps)} steps take {total:g} ms on average, more than the "
                    f"{action.mean:g} ms action phase that holds them",
                )
            )
        elif action.mean > total * LOOP_OVERHEAD + 10.0:
            found.append(
                (
                    "timing.phases.action.mean",
                    f"action = its steps: a {action.mean:g} ms action phase is more than {LOOP_OVERHEAD:g}x its "
                    f"{len(steps)} steps' {total:g} ms",
                )
            )
    return found


def duration_relations(result: RunResult) -> Problems:
    """The timed inferences, one after another, fit in the timed duration."""
    timing = result.timing
    e2e = timing.phases.get("e2e")
    if e2e is None or not math.isfinite(e2e.min):
        return []
    least_s = timing.iterations * e2e.min / 1000.0
    if least_s <= timing.timed_duration_s * (1 + RELATIVE) + 0.01:
        return []
    return [
        (
            "timing.iterations",
            f"inferences within the timed duration: {timing.iterations} inferences of at least {e2e.min:g} ms take "
            f"{least_s:g} s, more than the {timing.timed_duration_s:g} s timed",
        )
    ]
