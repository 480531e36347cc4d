"""Consistent variants of a real result for tests: other end-to-end samples, every latency scaled, or another power,
with every figure that depends on them (statistics, iterations, timed duration, the control verdict, energy per
inference and action) recomputed, so that the variant satisfies ``results.relations`` as a real run would."""

from __future__ import annotations

from datetime import timedelta

from vlabench.measure.stats import summarize
from vlabench.results.assemble import control_verdict
from vlabench.results.schema import RunResult
from vlabench.results.sustained import latency_windows

STATS = ("min", "p50", "p90", "p99", "max", "mean", "stdev")
"""The latency fields of a phase's statistics (the count and CoV do not scale with time)."""


def with_e2e_samples(result: RunResult, samples: list[float]) -> RunResult:
    """``result`` with these end-to-end samples: their statistics, as many iterations, a timed duration and a run
    long enough to hold them, and the control verdict of their percentiles."""
    e2e = summarize(samples)
    timing = result.timing.model_copy(
        update={
            "samples_ms": {**result.timing.samples_ms, "e2e": list(samples)},
            "phases": {**result.timing.phases, "e2e": e2e},
            "iterations": len(samples),
            "timed_duration_s": max(result.timing.timed_duration_s, sum(samples) / 1000.0),
        }
    )
    control = control_verdict(e2e, result.control.control_hz, result.control.execution_model())
    finished = max(result.finished_utc, result.started_utc + timedelta(seconds=timing.timed_duration_s + 1.0))
    held = result.sustained
    if held is not None:  # the new samples as one window
        window = latency_windows([0] * len(samples), list(samples), 0, timing.timed_duration_s + 1.0)
        held = held.model_copy(update={"windows": window, "p50_drift": None})
    return result.model_copy(update={"timing": timing, "control": control, "finished_utc": finished, "sustained": held})


def with_time_scaled(result: RunResult, factor: float) -> RunResult:
    """Every latency times ``factor``, with the timed duration, the run's length and the control verdict."""
    timing = result.timing

    def stats(s):
        return s.model_copy(update={key: getattr(s, key) * factor for key in STATS})

    changed = timing.model_copy(
        update={
            "phases": {name: stats(s) for name, s in timing.phases.items()},
            "denoise_steps": [stats(s) for s in timing.denoise_steps],
            "samples_ms": {name: [v * factor for v in values] for name, values in timing.samples_ms.items()},
            "first_inference_ms": timing.first_inference_ms * factor,
            "timed_duration_s": timing.timed_duration_s * factor,
        }
    )
    wall = (result.finished_utc - result.started_utc).total_seconds()
    finished = result.started_utc + timedelta(seconds=max(wall, changed.timed_duration_s + 1.0))
    control = control_verdict(changed.phases["e2e"], result.control.control_hz, result.control.execution_model())
    cold, held = result.cold_start, result.sustained
    if cold is not None:
        after_idle = cold.after_idle_ms and cold.after_idle_ms * factor
        first_action = cold.prepare_s + changed.first_inference_ms / 1000
        cold = cold.model_copy(update={"to_first_action_s": first_action, "after_idle_ms": after_idle})
    if held is not None:
        latencies = ("p50", "p99", "max")
        windows = [w.model_copy(update={key: getattr(w, key) * factor for key in latencies}) for w in held.windows]
        held = held.model_copy(update={"windows": windows})
    update = {"timing": changed, "control": control, "finished_utc": finished, "cold_start": cold, "sustained": held}
    return result.model_copy(update=update)


def with_power(result: RunResult, factor: float, **energy) -> RunResult:
    """``result`` with its average power (and so its energy per inference and per action) times ``factor``, and any
    other energy fields (``label``, ``method``) replaced."""
    block = result.energy
    assert block is not None
    average = block.average_w * factor
    seconds = block.window_s / block.window_inferences
    changed = block.model_copy(
        update={
            "average_w": average,
            "joules_per_inference": block.joules_per_inference * factor,
            "joules_per_action": block.joules_per_action * factor,
            "dynamic_joules_per_inference": (average - block.idle_w) * seconds,
            **energy,
        }
    )
    return result.model_copy(update={"energy": changed})
