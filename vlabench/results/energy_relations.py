"""Energy: average power × window time, per inference, per action of every row and above idle; the power within the
device's; the label the meter's method gives. (How many inferences fit the window is not bounded by the timed pass:
other load may change between the two passes.)"""

from __future__ import annotations

import math

from vlabench.errors import InputError
from vlabench.hardware.devices import load_device_profile
from vlabench.results.relation_terms import EXACT, Problems, RunResult, close
from vlabench.telemetry.energy.select import label_of_method

POWER_MARGIN = 2.0
"""Average power may exceed the device's TDP by this factor (a board measured whole, a short boost)."""
MAX_POWER_W = 20_000.0
"""No single device under test draws more (a 8-GPU server is about 10 kW); a device with no TDP is held to this."""


def power_limit(result: RunResult) -> tuple[float, str]:
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


def energy_relations(result: RunResult) -> Problems:
    """Energy is average power × window time, per inference and per action; the dynamic part is above idle power;
    the power is within the device's."""
    energy, found = result.energy, []
    if energy is None or energy.window_inferences < 1 or not energy.window_s > 0:
        return found
    seconds = energy.window_s / energy.window_inferences
    expected = energy.average_w * seconds
    if not close(energy.joules_per_inference, expected, EXACT):
        found.append(
            (
                "energy.joules_per_inference",
                f"energy = power x time: {energy.joules_per_inference:g} J per inference, but "
                f"{energy.average_w:g} W over {energy.window_s:g} s for {energy.window_inferences} inferences is "
                f"{expected:g} J",
            )
        )
    dynamic = (energy.average_w - energy.idle_w) * seconds
    if not close(energy.dynamic_joules_per_inference, dynamic, EXACT):
        found.append(
            (
                "energy.dynamic_joules_per_inference",
                f"energy above idle = (power - idle power) x time: {energy.dynamic_joules_per_inference:g} J "
                f"recorded, ({energy.average_w:g} - {energy.idle_w:g}) W x {seconds:g} s is {dynamic:g} J",
            )
        )
    actions = result.control.actions_per_chunk * result.workload.batch  # each row of a batch is a robot's
    if actions >= 1 and not close(energy.joules_per_action * actions, energy.joules_per_inference, EXACT):
        found.append(
            (
                "energy.joules_per_action",
                f"energy per action = per inference / actions (of every row of the batch): "
                f"{energy.joules_per_action:g} J x {actions} actions against {energy.joules_per_inference:g} J per "
                "inference",
            )
        )
    limit, source = power_limit(result)
    for field in ("average_w", "idle_w"):
        watts = getattr(energy, field)
        if watts > limit:
            found.append((f"energy.{field}", f"power within the device: {watts:g} W is above {source}"))
    return found


def label_relations(result: RunResult) -> Problems:
    """Energy is labelled as its meter's method labels it (an estimate from TDP is never "measured"), the meter's
    own record agrees, and the cost says the same."""
    energy, found = result.energy, []
    if energy is None:
        return found
    expected = label_of_method(energy.method)
    if expected is not None and energy.label != expected:
        found.append(("energy.label", f"label of the method: {energy.method} energy is {expected}, not {energy.label}"))
    for key in ("method", "label"):
        recorded = energy.meter.get(key)
        if recorded is not None and recorded != getattr(energy, key):
            found.append(
                (
                    f"energy.meter.{key}",
                    f"label of the method: the meter records {key} {recorded!r}, the energy {getattr(energy, key)!r}",
                )
            )
    cost = result.cost
    if cost is not None and cost.energy_label != energy.label:
        found.append(
            (
                "cost.energy_label",
                f"label of the method: the cost says its energy is {cost.energy_label}, the energy {energy.label}",
            )
        )
    return found
