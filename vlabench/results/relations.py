"""Relations between a result's figures that every real measurement satisfies.

Each figure can be in range and the result still impossible: an end-to-end time shorter than its own action phase, a
megajoule per inference from a 12 W average over three seconds, a memory peak larger than the device. These rules tie
the figures together; a result that breaks one is refused by every reader (``RunResult.physical_problems``), and the
message names the rule. Tolerances cover rounding and timer granularity, never a measurement error.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

from vlabench.analysis.cet import gate
from vlabench.errors import InputError
from vlabench.hardware.devices import load_device_profile
from vlabench.measure.cold_start import STAGES
from vlabench.measure.stats import Stats
from vlabench.results.serving_relations import serving_relations

Problems = list[tuple[str, str]]
"""(field, what is wrong with it)."""
RunResult = Any
"""A ``results.schema.RunResult`` (the schema imports this module: the rules read its fields, nothing more)."""

ORDER_STATISTICS = ("min", "p50", "p90", "p99", "max")
RELATIVE = 0.02
"""Sums of means and products of figures agree within 2% (plus ``ABSOLUTE_MS`` for latencies)."""
ABSOLUTE_MS = 0.5
"""Timer granularity and the gaps between nested spans, per sum."""
LOOP_OVERHEAD = 2.0
"""The action phase may exceed its steps' sum by this factor (plus 10 ms): the loop's own work between steps."""
POWER_MARGIN = 2.0
"""Average power may exceed the device's TDP by this factor (a board measured whole, a short boost)."""
MAX_POWER_W = 20_000.0
"""No single device under test draws more (a 8-GPU server is about 10 kW); a device with no TDP is held to this."""
MEMORY_MARGIN = 1.1
"""A memory peak may exceed the recorded device memory by 10% (GB against GiB, shared memory counted twice)."""
MAX_MEMORY_BYTES = 1e15
"""1 PB: no host or device under test has more memory."""


def relation_problems(result: RunResult) -> Problems:
    """Every broken relation, as (field, "rule: what is wrong")."""
    return [
        *_phase_relations(result),
        *_sample_relations(result),
        *_time_relations(result),
        *_energy_relations(result),
        *_memory_relations(result),
        *_control_relations(result),
        *_cost_relations(result),
        *_cold_start_relations(result),
        *_window_relations(result),
        *serving_relations(result),
    ]


def _close(a: float, b: float, absolute: float = 0.0) -> bool:
    return abs(a - b) <= RELATIVE * max(abs(a), abs(b)) + absolute


def _phase_relations(result: RunResult) -> Problems:
    """Parts within the whole, percentile by percentile (each iteration's part lies inside its whole, and order
    statistics keep that); the prefix is vision + prefill; the action phase holds its steps."""
    phases, found = result.timing.phases, []
    e2e = phases.get("e2e")
    for name in ("preprocess", "vision", "prefill", "prefix", "action", "postprocess"):
        part = phases.get(name)
        if e2e is None or part is None or part.count != e2e.count:
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
    if vision and prefill and prefix and not _close(vision.mean + prefill.mean, prefix.mean, ABSOLUTE_MS):
        found.append(
            (
                "timing.phases.prefix.mean",
                f"prefix = vision + prefill: {vision.mean:g} + {prefill.mean:g} ms against a prefix of "
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


def _sample_relations(result: RunResult) -> Problems:
    """The recorded samples of a phase are the ones its statistics summarize: their count, min and max."""
    found = []
    for name, samples in result.timing.samples_ms.items():
        stats: Stats | None = result.timing.phases.get(name)
        if stats is None or not samples or not all(map(math.isfinite, samples)):
            continue
        if len(samples) != stats.count:
            found.append(
                (
                    f"timing.samples_ms.{name}",
                    f"statistics of the samples: {len(samples)} samples against a count of {stats.count}",
                )
            )
        elif not (_close(min(samples), stats.min, 1e-6) and _close(max(samples), stats.max, 1e-6)):
            found.append(
                (
                    f"timing.samples_ms.{name}",
                    f"statistics of the samples: samples span {min(samples):g}..{max(samples):g} ms, the statistics "
                    f"{stats.min:g}..{stats.max:g} ms",
                )
            )
    return found


def _time_relations(result: RunResult) -> Problems:
    """The timed inferences fit in the timed duration, which fits between the run's start and finish. An offload
    result's (``run --remote``) start and finish span the robots' window, and its timing is the server's baseline
    pass, timed on the server before that window: there the robots' serving duration is what must fit."""
    timing, found = result.timing, []
    wall_s = (result.finished_utc - result.started_utc).total_seconds()
    served = result.serving
    if served is not None and served.transport == "grpc":
        field, timed_s = "serving.duration_s", served.duration_s
    else:
        field, timed_s = "timing.timed_duration_s", timing.timed_duration_s
    if timed_s > wall_s * (1 + RELATIVE) + 1.0:
        found.append(
            (field, f"timed within the run: {timed_s:g} s of timing between a start and finish {wall_s:g} s apart")
        )
    e2e = timing.phases.get("e2e")
    if e2e is not None and math.isfinite(e2e.min):
        least_s = timing.iterations * e2e.min / 1000.0
        if least_s > timing.timed_duration_s * (1 + RELATIVE) + 0.01:
            found.append(
                (
                    "timing.iterations",
                    f"inferences within the timed duration: {timing.iterations} inferences of at least "
                    f"{e2e.min:g} ms take {least_s:g} s, more than the {timing.timed_duration_s:g} s timed",
                )
            )
    return found


def _power_limit(result: RunResult) -> tuple[float, str]:
    """The most average power the device may draw, and where that comes from."""
    try:
        tdp = load_device_profile(result.device.profile).tdp_w
    except InputError:
        tdp = None
    if tdp is not None:
        return tdp.value * POWER_MARGIN, f"{POWER_MARGIN:g}x the {tdp.value:g} W TDP of {result.device.profile}"
    meter_tdp = result.energy.meter.get("tdp_w") if result.energy else None
    if isinstance(meter_tdp, (int, float)) and math.isfinite(meter_tdp) and meter_tdp > 0:
        return meter_tdp * POWER_MARGIN, f"{POWER_MARGIN:g}x the {meter_tdp:g} W TDP the estimate assumed"
    return MAX_POWER_W, f"{MAX_POWER_W:g} W, more than any single device under test draws"


def _energy_relations(result: RunResult) -> Problems:
    """Energy is average power × window time, per inference and per action; the power is within the device's."""
    energy, found = result.energy, []
    if energy is None or energy.window_inferences < 1 or not energy.window_s > 0:
        return found
    expected = energy.average_w * energy.window_s / energy.window_inferences
    if not _close(energy.joules_per_inference, expected, 1e-9):
        found.append(
            (
                "energy.joules_per_inference",
                f"energy = power x time: {energy.joules_per_inference:g} J per inference, but "
                f"{energy.average_w:g} W over {energy.window_s:g} s for {energy.window_inferences} inferences is "
                f"{expected:g} J",
            )
        )
    actions = result.control.actions_per_chunk * result.workload.batch  # each row of a batch is a robot's
    if actions >= 1 and not _close(energy.joules_per_action * actions, energy.joules_per_inference, 1e-9):
        found.append(
            (
                "energy.joules_per_action",
                f"energy per action = per inference / actions (of every row of the batch): "
                f"{energy.joules_per_action:g} J x {actions} actions against {energy.joules_per_inference:g} J per "
                "inference",
            )
        )
    limit, source = _power_limit(result)
    for field in ("average_w", "idle_w"):
        watts = getattr(energy, field)
        if watts > limit:
            found.append((f"energy.{field}", f"power within the device: {watts:g} W is above {source}"))
    return found


def _memory_relations(result: RunResult) -> Problems:
    """A memory peak fits in the device (the host's RAM for a CPU or a unified-memory SoC; the accelerator's
    memory for what CUDA allocated)."""
    memory, device, found = result.memory, result.device, []
    limit = device.memory_gb * 1e9 * MEMORY_MARGIN if device.memory_gb else MAX_MEMORY_BYTES
    shared = device.torch_device.startswith("cpu") or device.kind == "soc"
    peaks = [("cuda_max_allocated_bytes", memory.cuda_max_allocated_bytes)]
    if shared:
        peaks.append(("peak_rss_bytes", memory.peak_rss_bytes))
    for field, peak in peaks:
        if peak is not None and peak > limit:
            where = f"the device's {device.memory_gb:g} GB" if device.memory_gb else "1 PB"
            found.append((f"memory.{field}", f"memory within the device: a {peak / 1e9:g} GB peak exceeds {where}"))
    if not shared and memory.peak_rss_bytes > MAX_MEMORY_BYTES:
        found.append(("memory.peak_rss_bytes", f"memory within the host: {memory.peak_rss_bytes / 1e9:g} GB"))
    return found


def _control_relations(result: RunResult) -> Problems:
    """The control block's rates and reaction delay are the gate of the recorded end-to-end percentiles (a served
    run's: of the latency its robots saw)."""
    control = result.control
    e2e = result.serving.latency if result.serving else result.timing.phases.get("e2e")
    if e2e is None or control.regated_from is not None:
        return []
    judged = e2e.judged_p99()[0]
    verdict = gate(e2e.p50, judged, control.control_hz, control.execution_model())
    pairs = (
        ("inference_hz_p50", verdict.inference_hz_p50),
        ("inference_hz_p99", verdict.inference_hz_p99),
        ("reaction_ms", verdict.reaction_ms),
        ("delivered_action_hz_p50", verdict.delivered_action_hz),
        ("delivered_action_hz_p99", verdict.delivered_action_hz_p99),
    )
    return [
        (
            f"control.{field}",
            f"throughput from latency: {getattr(control, field):g} recorded, {expected:g} from the end-to-end "
            f"p50 {e2e.p50:g} ms and the judged {judged:g} ms",
        )
        for field, expected in pairs
        if not _close(getattr(control, field), expected, 1e-9)
    ]


def _cost_relations(result: RunResult) -> Problems:
    """Dollars per million actions are dollars per robot-hour over the actions of that hour."""
    cost = result.cost
    if cost is None or not cost.actions_per_robot_hour > 0:
        return []
    expected = cost.usd_per_robot_hour / cost.actions_per_robot_hour * 1e6
    if _close(cost.usd_per_million_actions, expected, 1e-12):
        return []
    return [
        (
            "cost.usd_per_million_actions",
            f"cost per action = cost per hour / actions per hour: {cost.usd_per_million_actions:g} $ recorded, "
            f"{cost.usd_per_robot_hour:g} $/h over {cost.actions_per_robot_hour:g} actions/h is {expected:g} $",
        )
    ]


def _cold_start_relations(result: RunResult) -> Problems:
    """The stages are disjoint parts of the preparation; the first action comes after it and the first inference;
    every time is finite and ≥ 0; an idle probe records its idle period and its latency together."""
    cold = result.cold_start
    if cold is None:
        return []
    found = [
        (f"cold_start.{field}", f"a time: {value:g} s is not finite and ≥ 0")
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
    if not _close(cold.to_first_action_s, expected, ABSOLUTE_MS / 1000):
        found.append(
            (
                "cold_start.to_first_action_s",
                f"first action = preparation + first inference: {cold.to_first_action_s:g} s recorded, "
                f"{cold.prepare_s:g} s + {result.timing.first_inference_ms:g} ms is {expected:g} s",
            )
        )
    probed = [cold.idle_s is not None, cold.after_idle_ms is not None]
    if any(probed) and not all(probed):
        found.append(("cold_start.after_idle_ms", "an idle probe records its idle period and its latency together"))
    elif all(probed) and not (cold.idle_s >= 0 and math.isfinite(cold.after_idle_ms) and cold.after_idle_ms > 0):
        found.append(
            ("cold_start.after_idle_ms", f"{cold.after_idle_ms:g} ms after {cold.idle_s:g} s idle: impossible")
        )
    return found


def _window_relations(result: RunResult) -> Problems:
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
