"""A run's clock: it finished before now, its passes fit between its start and finish, its preparation stages fit in
the preparation, and its latency windows and sensor readings partition the timed pass and run forward."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from itertools import pairwise

from vlabench.measure.cold_start import STAGES
from vlabench.results.relation_terms import (
    ABSOLUTE_MS,
    RELATIVE,
    WALL_SLACK_S,
    Problems,
    RunResult,
    close,
    is_offload,
    wall_seconds,
)

CLOCK_SKEW = timedelta(days=1)
"""A result may carry a finish this far after the reader's now (the measuring host's clock set differently)."""


def now_relations(result: RunResult, now: datetime | None = None) -> Problems:
    """A run finished before now (give or take ``CLOCK_SKEW``): a result from the future is no measurement."""
    latest = (now or datetime.now(timezone.utc)) + CLOCK_SKEW
    if result.finished_utc <= latest:
        return []
    return [
        (
            "finished_utc",
            f"time bounded by now: finished {result.finished_utc.isoformat()}, after the present "
            f"{latest - CLOCK_SKEW:%Y-%m-%d %H:%M} UTC",
        )
    ]


def pass_relations(result: RunResult) -> Problems:
    """The passes a run measured one after another fit between its start and finish: the timed pass, the energy
    pass's idle and busy windows and, for robots served in this process, the serving. An offload result's timed and
    energy passes are the server's baseline, measured before its robots began: only their serving is compared with
    its start and finish, like with like."""
    wall_s, served, energy = wall_seconds(result), result.serving, result.energy
    if is_offload(result):
        passes = [("serving.duration_s", "the robots were served", served.duration_s)]
    else:
        passes = [("timing.timed_duration_s", "timing", result.timing.timed_duration_s)]
        if energy is not None:
            passes += [
                ("energy.idle_window_s", "the idle window", energy.idle_window_s),
                ("energy.window_s", "the energy window", energy.window_s),
            ]
        if served is not None:
            passes.append(("serving.duration_s", "serving", served.duration_s))
    total = sum(seconds for *_, seconds in passes)
    if total <= wall_s * (1 + RELATIVE) + WALL_SLACK_S:
        return []
    field = max(passes, key=lambda entry: entry[2])[0]
    shown = " + ".join(f"{seconds:g} s of {what}" for _, what, seconds in passes)
    return [(field, f"timed within the run: {shown} between a start and finish {wall_s:g} s apart")]


def cold_start_relations(result: RunResult) -> Problems:
    """The stages are disjoint parts of the preparation; the first action comes after it and the first inference;
    every time is finite and ≥ 0; an idle probe records its idle period and its latency together."""
    cold = result.cold_start
    if cold is None:
        return []
    found = [
        (f"cold_start.{field}", f"a time of the preparation: {value:g} s is not finite and ≥ 0")
        for field, value in [("prepare_s", cold.prepare_s), ("to_first_action_s", cold.to_first_action_s)]
        + [(f"stages.{name}.seconds", stage.seconds) for name, stage in cold.stages.items()]
        if not (math.isfinite(value) and value >= 0)
    ]
    if found:
        return found
    unknown = sorted(set(cold.stages) - set(STAGES))
    if unknown:
        found.append(
            ("cold_start.stages", f"stages of a preparation: {', '.join(unknown)} is none of {', '.join(STAGES)}")
        )
    total = sum(stage.seconds for stage in cold.stages.values())
    if total > cold.prepare_s * (1 + RELATIVE) + ABSOLUTE_MS / 1000:
        found.append(
            (
                "cold_start.stages",
                f"stages within the preparation: they sum to {total:g} s, more than the {cold.prepare_s:g} s "
                "preparation that contains them",
            )
        )
    expected = cold.prepare_s + result.timing.first_inference_ms / 1000
    if not close(cold.to_first_action_s, expected, ABSOLUTE_MS / 1000):
        found.append(
            (
                "cold_start.to_first_action_s",
                f"first action = preparation + first inference: {cold.to_first_action_s:g} s recorded, "
                f"{cold.prepare_s:g} s + {result.timing.first_inference_ms:g} ms is {expected:g} s",
            )
        )
    probed = [cold.idle_s is not None, cold.after_idle_ms is not None]
    if any(probed) and not all(probed):
        found.append(("cold_start.after_idle_ms", "an idle probe: it records its idle period and its latency together"))
    elif all(probed) and not (cold.idle_s >= 0 and math.isfinite(cold.after_idle_ms) and cold.after_idle_ms > 0):
        found.append(
            (
                "cold_start.after_idle_ms",
                f"an idle probe: {cold.after_idle_ms:g} ms after {cold.idle_s:g} s idle is impossible",
            )
        )
    return found


def window_relations(result: RunResult) -> Problems:
    """The windows partition the timed end-to-end inferences: their counts sum to the iterations, each window's
    percentiles are ordered and lie within the whole pass's min..max; windows and sensor readings run forward."""
    held, e2e = result.sustained, result.timing.phases.get("e2e")
    if held is None or e2e is None:
        return []
    found = []
    counted = sum(window.count for window in held.windows)
    if counted != e2e.count:
        found.append(
            ("sustained.windows", f"windows of the pass: they hold {counted} inferences, the pass {e2e.count}")
        )
    slack = 1e-9 * e2e.max + 1e-9
    for index, window in enumerate(held.windows):
        values = (e2e.min, window.p50, window.p99, window.max, e2e.max)
        if not all(map(math.isfinite, values)) or any(a > b + slack for a, b in pairwise(values)):
            found.append(
                (
                    f"sustained.windows.{index}",
                    f"a window within the pass: p50 {window.p50:g} ≤ p99 {window.p99:g} ≤ max {window.max:g} ms "
                    f"must lie in the pass's {e2e.min:g}..{e2e.max:g} ms",
                )
            )
            break
    times = [window.start_s for window in held.windows], [sample.t_s for sample in held.sensors]
    finite = all(math.isfinite(t) for series in times for t in series)
    if not finite or any(a > b for series in times for a, b in pairwise(series)):
        found.append(("sustained", "time runs forward: windows and sensor readings must be in time order"))
    return found
