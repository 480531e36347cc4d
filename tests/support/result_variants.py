"""Consistent variants of a real result for tests: other end-to-end samples, every latency scaled, or another power,
with every figure that depends on them (statistics, iterations, timed duration, the control verdict, energy per
inference and action, the cost) recomputed, so that the variant satisfies ``results.relations`` as a real run
would."""

from __future__ import annotations

from datetime import timedelta

from vlabench.measure.stats import summarize
from vlabench.results.assemble import control_verdict
from vlabench.results.cost_relations import model_cost
from vlabench.results.schema import RunResult
from vlabench.results.sustained import latency_windows

STATS = ("min", "p50", "p90", "p99", "max", "mean", "stdev")
"""The latency fields of a phase's statistics (the count and CoV do not scale with time)."""


def recosted(result: RunResult) -> RunResult:
    """``result`` with the cost its (changed) latency and energy give."""
    if result.cost is None or result.energy is None:
        return result
    return result.model_copy(update={"cost": model_cost(result)})


def run_seconds(result: RunResult, timing) -> float:
    """How long a run lasts at least: its timed pass, its energy pass and a second for the rest."""
    energy = result.energy
    return timing.timed_duration_s + (energy.idle_window_s + energy.window_s if energy else 0.0) + 1.0


def refit_energy(result: RunResult) -> RunResult:
    """``result`` with its energy window as long as its inferences take at its end-to-end median (and the energy per
    inference and action that follow at the same power), as a real energy pass at that latency would measure."""
    energy = result.energy
    if energy is None:
        return result
    seconds = result.timing.phases["e2e"].p50 / 1000
    per_inference = energy.average_w * seconds
    actions = energy.joules_per_inference / energy.joules_per_action
    changed = energy.model_copy(
        update={
            "window_s": energy.window_inferences * seconds,
            "joules_per_inference": per_inference,
            "joules_per_action": per_inference / actions,
            "dynamic_joules_per_inference": (energy.average_w - energy.idle_w) * seconds,
        }
    )
    return result.model_copy(update={"energy": changed})


def lasting(result: RunResult) -> RunResult:
    """``result`` finishing late enough to hold its passes (``run_seconds``), if it did not already."""
    finished = max(result.finished_utc, result.started_utc + timedelta(seconds=run_seconds(result, result.timing)))
    return result.model_copy(update={"finished_utc": finished})


def with_e2e_samples(result: RunResult, samples: list[float]) -> RunResult:
    """``result`` timing only these end-to-end samples (the other phases left out: they would not be parts of them):
    their statistics, as many iterations, a timed duration and a run long enough to hold them, the control verdict of
    their percentiles, and the energy window's inferences at their latency."""
    e2e = summarize(samples)
    timing = result.timing.model_copy(
        update={
            "samples_ms": {"e2e": list(samples)},
            "phases": {"e2e": e2e},
            "denoise_steps": [],
            "iterations": len(samples),
            "timed_duration_s": max(result.timing.timed_duration_s, sum(samples) / 1000.0),
        }
    )
    control = control_verdict(e2e, result.control.control_hz, result.control.execution_model())
    held = result.sustained
    if held is not None:  # the new samples as one window
        window = latency_windows([0] * len(samples), list(samples), 0, timing.timed_duration_s + 1.0)
        held = held.model_copy(update={"windows": window, "p50_drift": None})
    update = {"timing": timing, "control": control, "sustained": held}
    return recosted(lasting(refit_energy(result.model_copy(update=update))))


def with_time_scaled(result: RunResult, factor: float) -> RunResult:
    """Every latency times ``factor``, with the timed duration, the run's length and the control verdict."""
    timing = result.timing

    def stats(s):
        intervals = {
            name: tuple(None if end is None else end * factor for end in ends) for name, ends in s.intervals.items()
        }
        return s.model_copy(update={**{key: getattr(s, key) * factor for key in STATS}, "intervals": intervals})

    changed = timing.model_copy(
        update={
            "phases": {name: stats(s) for name, s in timing.phases.items()},
            "denoise_steps": [stats(s) for s in timing.denoise_steps],
            "samples_ms": {name: [v * factor for v in values] for name, values in timing.samples_ms.items()},
            "first_inference_ms": timing.first_inference_ms * factor,
            "timed_duration_s": timing.timed_duration_s * factor,
        }
    )
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
    update = {"timing": changed, "control": control, "cold_start": cold, "sustained": held}
    return recosted(lasting(refit_energy(result.model_copy(update=update))))


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
            "meter": {**block.meter, **{key: value for key, value in energy.items() if key in ("method", "label")}},
            **energy,
        }
    )
    return recosted(result.model_copy(update={"energy": changed}))
