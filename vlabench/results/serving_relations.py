"""Relations of a served result (``serving`` block) that every real serving window satisfies, in the style of
``results.relations`` (which calls ``serving_relations``): requests add up over robots and batches, batches run one
after another inside the window, robots see at least the server's own time, the rates follow from the counts, the
window's energy is its batches' and its idle time's, the cost is that window's, and the capacity is the largest
count that passed. A result that breaks one is refused by every reader; the message names the rule."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

from vlabench.analysis.cet import gate
from vlabench.results.serving_energy import Pricing, served_cost
from vlabench.results.serving_parts import FREEZE_MIN_MS

RunResult = Any
"""A ``results.schema.RunResult`` (the schema imports this module through ``results.relations``)."""
Problems = list[tuple[str, str]]
RELATIVE = 0.02
ABSOLUTE_MS = 0.5
ORDER = ("min", "p50", "p90", "p99", "max")
WINDOW_ACCOUNTING = (1, 6)
"""The schema from which a served window's energy and cost are the window's own (its batches and idle time)."""
POISSON_SIGMAS = 6.0
"""Open-loop arrivals: a request count may exceed its expectation by this many standard deviations."""


def _close(a: float, b: float, absolute: float = 1e-9) -> bool:
    return abs(a - b) <= RELATIVE * max(abs(a), abs(b)) + absolute


def serving_relations(result: RunResult) -> Problems:
    """Every broken relation of the serving block, as (field, "rule: what is wrong")."""
    served = result.serving
    found: Problems = []
    if (result.status == "partial") != (result.partial_reason is not None):
        found.append(("partial_reason", "a partial result says why, and only a partial result does"))
    if served is None:
        return found
    if served.status == "partial" and result.status != "partial":
        found.append(("status", "a result whose serving window ended early is partial"))
    if (served.status == "partial") != (served.stopped is not None):
        found.append(("serving.stopped", "a partial window says why it stopped, and only a partial window does"))
    found += [*_count_relations(served, result), *_latency_relations(served), *_batch_relations(served)]
    if _version(result.schema_version) < WINDOW_ACCOUNTING:
        return found  # before 1.6 a served result's energy and cost were the energy pass's, shared by its mean batch
    return [*found, *_energy_relations(served), *_cost_relations(served, result), *_capacity_relations(served, result)]


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return (0,)


def _count_relations(served: Any, result: RunResult) -> Problems:
    found = []
    robots = [robot.robot for robot in served.per_robot]
    if len(set(robots)) != len(robots) or any(not 0 <= robot < served.robots for robot in robots):
        found.append(("serving.per_robot", f"robots of the window: entries {robots} for {served.robots} robots"))
    if served.arrivals == "closed" and served.status == "complete" and len(robots) + served.unfinished < served.robots:
        found.append(
            (
                "serving.per_robot",
                f"every robot asks: {len(robots)} of {served.robots} closed-loop robots were served in a complete "
                f"window ({served.unfinished} unanswered at its end); each asks within the first half",
            )
        )
    counted = sum(robot.requests for robot in served.per_robot)
    if counted != served.requests:
        found.append(("serving.requests", f"requests = robots' requests: {served.requests} against {counted}"))
    actions = served.requests * served.actions_per_request
    rates = (("actions_per_s", actions), ("inferences_per_s", served.batches))
    for field, count in rates:
        expected = count / served.duration_s
        if not _close(getattr(served, field), expected):
            found.append(
                (
                    f"serving.{field}",
                    f"rate = count / window: {getattr(served, field):g} recorded, {count} in {served.duration_s:g} s "
                    f"is {expected:g}",
                )
            )
    asks = served.robots * served.duration_s / (served.request_period_ms / 1000.0)
    # an async robot asks for its next chunk as soon as one arrives, before executing it: one ask more than the rest
    first = served.robots * (2 if served.execution == "async" else 1)
    most = asks + first if served.arrivals == "closed" else asks + POISSON_SIGMAS * math.sqrt(asks) + 10
    if served.requests + served.unfinished + served.shed > most * (1 + RELATIVE):
        found.append(
            (
                "serving.requests",
                f"requests the robots ask: {served.requests} requests from {served.robots} robots asking every "
                f"{served.request_period_ms:g} ms for {served.duration_s:g} s (at most {most:.0f})",
            )
        )
    wall_s = (result.finished_utc - result.started_utc).total_seconds()
    if served.duration_s > wall_s * (1 + RELATIVE) + 1.0:
        found.append(("serving.duration_s", f"served within the run: {served.duration_s:g} s in a {wall_s:g} s run"))
    if served.mean_batch > served.max_batch * (1 + 1e-9) or (served.requests and served.mean_batch < 1 - 1e-9):
        found.append(("serving.mean_batch", f"batch size: mean {served.mean_batch:g} outside 1..{served.max_batch}"))
    for index, robot in enumerate(served.per_robot):
        if robot.latency_p50_ms > robot.latency_p99_ms * (1 + 1e-9) or not (
            served.latency.min * (1 - 1e-9) <= robot.latency_p50_ms <= served.latency.max * (1 + 1e-9)
        ):
            found.append(
                (
                    f"serving.per_robot.{index}",
                    f"a robot within the window: p50 {robot.latency_p50_ms:g} ≤ p99 {robot.latency_p99_ms:g} ms, "
                    f"within the window's {served.latency.min:g}..{served.latency.max:g} ms",
                )
            )
            break
    return found


def _latency_relations(served: Any) -> Problems:
    """A robot waits at least its request's queueing and inference (order statistics keep that), and stalls at most
    its latency; the parts of the way (their means) fit in the whole."""
    found = []
    for part in ("queue", "inference"):
        stats = getattr(served, part)
        for stat in ORDER:
            if getattr(served.latency, stat) < getattr(stats, stat) * (1 - 1e-9) - 1e-6:
                found.append(
                    (
                        f"serving.latency.{stat}",
                        f"robots see the server's time: latency {stat} {getattr(served.latency, stat):g} ms is "
                        f"shorter than the {part} {stat} {getattr(stats, stat):g} ms inside it",
                    )
                )
                break
    if served.stall.max > served.latency.max * (1 + 1e-9) + 1e-6:
        found.append(
            (
                "serving.stall.max",
                f"a stall within its reply: {served.stall.max:g} ms stall, longest reply {served.latency.max:g} ms",
            )
        )
    if served.stall.max == 0 and served.late_share > 0:
        found.append(("serving.late_share", f"late replies stall: {served.late_share:g} late with no stall"))
    parts = sum(stats.mean for stats in served.split_ms.values()) + served.queue.mean + served.inference.mean
    if parts > served.latency.mean * (1 + RELATIVE) + ABSOLUTE_MS * (len(served.split_ms) + 2):
        found.append(
            (
                "serving.split_ms",
                f"parts within the whole: the parts' means add to {parts:g} ms, more than the {served.latency.mean:g} "
                "ms mean latency",
            )
        )
    for index, freeze in enumerate(served.freezes):
        if not (FREEZE_MIN_MS <= freeze.latency_ms <= served.latency.max * (1 + 1e-9)) or freeze.robot >= served.robots:
            found.append((f"serving.freezes.{index}", "a freeze is a reply of the window of at least a second"))
            break
    return found


def _batch_relations(served: Any) -> Problems:
    """The batch log: one entry per batch, each within 1..max batch requests and its padded rows, one after another
    inside the window; its durations are the busy time, its sizes the mean batch."""
    log = served.batch_log
    if log is None:
        return []
    found = []
    columns = [len(log.start_ms), len(log.duration_ms), len(log.size), len(log.rows)]
    if len(set(columns)) != 1 or columns[0] != served.batches or (log.joules and len(log.joules) != columns[0]):
        return [("serving.batch_log", f"one entry per batch: columns of {columns} for {served.batches} batches")]
    largest = max(served.batch_sizes, default=served.max_batch)
    for index, (size, rows, duration) in enumerate(zip(log.size, log.rows, log.duration_ms, strict=True)):
        if not (1 <= size <= served.max_batch and (rows == 0 or size <= rows <= largest) and duration >= 0):
            found.append(
                (
                    f"serving.batch_log.{index}",
                    f"a batch: {size} requests on {rows} rows in {duration:g} ms (1..{served.max_batch} requests, "
                    f"rows from its size to {largest}, or 0 when it failed)",
                )
            )
            break
    ends = [start + duration for start, duration in zip(log.start_ms, log.duration_ms, strict=True)]
    if any(end > start + ABSOLUTE_MS for end, start in zip(ends, log.start_ms[1:], strict=False)) or any(
        a > b for a, b in pairwise(log.start_ms)
    ):
        found.append(("serving.batch_log.start_ms", "batches one after another: a batch starts before the last ended"))
    busy_s = sum(log.duration_ms) / 1000.0
    checks = [
        ("busy_s", served.busy_s, busy_s, "busy time = the batches' durations"),
        ("busy_fraction", served.busy_fraction, busy_s / served.duration_s, "busy share = busy time / window"),
        ("mean_batch", served.mean_batch, sum(log.size) / max(1, len(log.size)), "mean batch = requests / batches"),
    ]
    found += [
        (f"serving.{field}", f"{rule}: {value:g} recorded, {expected:g} from the batch log")
        for field, value, expected, rule in checks
        if value is None or not _close(value, expected)
    ]
    if busy_s > served.duration_s * (1 + RELATIVE) or (ends and ends[-1] > served.duration_s * 1000 * (1 + RELATIVE)):
        found.append(("serving.busy_s", f"batches within the window: {busy_s:g} s busy in {served.duration_s:g} s"))
    if sum(log.size) < served.requests:
        found.append(("serving.batch_log.size", f"every request in a batch: {sum(log.size)} < {served.requests}"))
    return found


def _energy_relations(served: Any) -> Problems:
    """The window's joules are its batches' and its idle time's; idle at most idle power over the time not busy;
    per action the whole over the actions delivered."""
    energy, log = served.energy, served.batch_log
    if energy is None:
        if served.joules_per_action is not None:
            return [("serving.joules_per_action", "energy per action from a window without energy")]
        return []
    found = []
    shares = sum(log.joules) if log is not None else 0.0
    if not _close(shares + energy.idle_joules, energy.joules, 1e-9):
        found.append(
            (
                "serving.energy.joules",
                f"window = batches + idle: {energy.joules:g} J against {shares:g} + {energy.idle_joules:g} J",
            )
        )
    busy_ms = sum(log.duration_ms) if log is not None else 0.0
    if log is not None and log.joules and busy_ms > 0:
        busy_joules = sum(log.joules)
        for index, (joules, duration) in enumerate(zip(log.joules, log.duration_ms, strict=True)):
            if not _close(joules, busy_joules * duration / busy_ms, 1e-9):
                found.append(
                    (
                        f"serving.batch_log.joules.{index}",
                        f"a batch's energy follows its duration: {joules:g} J for {duration:g} ms of the batches' "
                        f"{busy_ms:g} ms and {busy_joules:g} J",
                    )
                )
                break
    idle_s = max(0.0, served.duration_s - (served.busy_s or 0.0))
    if energy.idle_joules > energy.idle_w * idle_s * (1 + RELATIVE) + 1e-9 or any(j < 0 for j in log.joules):
        found.append(
            (
                "serving.energy.idle_joules",
                f"idle share ≤ idle power x time not busy ({energy.idle_w:g} W x {idle_s:g} s), batch shares ≥ 0",
            )
        )
    if not _close(energy.window_s, served.duration_s):
        found.append(("serving.energy.window_s", f"the energy's window is the serving window: {energy.window_s:g} s"))
    actions = served.requests * served.actions_per_request
    expected = energy.joules / actions if actions else None
    if expected is None or served.joules_per_action is None or not _close(served.joules_per_action, expected):
        found.append(
            (
                "serving.joules_per_action",
                f"energy per action = window's joules / actions: {served.joules_per_action} recorded, {expected}",
            )
        )
    return found


def _cost_relations(served: Any, result: RunResult) -> Problems:
    """A served result's cost is the window's (``serving_energy.served_cost``, as assemble costs it), field by field."""
    cost, load = result.cost, served.load()
    if cost is None:
        return []
    if load is None:
        return [("cost", "a served result's cost comes from its window's energy, which it does not have")]
    expected = served_cost(served, Pricing.of(cost), result.control.control_hz, result.control.execution_model())
    for field in (
        "actions_per_robot_hour",
        "busy_fraction",
        "robots_per_device",
        "rows_per_inference",
        "energy_kwh_per_robot_hour",
        "hardware_usd_per_robot_hour",
        "usd_per_robot_hour",
        "joules_per_action",
    ):
        recorded, recomputed = getattr(cost, field), getattr(expected, field)
        if (recorded is None) != (recomputed is None) or (recorded is not None and not _close(recorded, recomputed)):
            return [(f"cost.{field}", f"cost of the window served: {recorded} recorded, {recomputed} from it")]
    return []


def _capacity_relations(served: Any, result: RunResult) -> Problems:
    """The capacity is the largest count that passed; a count passes only when its slowest robot's p99 meets the
    gate; the block served is the one at the capacity."""
    search = served.capacity
    if search is None:
        return [] if served.capacity_robots is None else [("serving.capacity_robots", "a capacity with no search")]
    passed = [step.robots for step in search.steps if step.passed]
    expected = max(passed, default=0)
    found = []
    if served.capacity_robots != search.capacity_robots or search.capacity_robots != expected:
        found.append(
            (
                "serving.capacity_robots",
                f"capacity = the largest count that passed: {served.capacity_robots} recorded, {expected} passed",
            )
        )
    if served.robots != max(expected, 1) or any(step.robots > search.most for step in search.steps):
        found.append(("serving.robots", f"the block at the capacity: {served.robots} robots for capacity {expected}"))
    execution = result.control.execution_model()
    for index, step in enumerate(search.steps):
        verdict = gate(max(step.latency_p50_ms, 1e-9), max(step.worst_p99_ms, 1e-9), search.control_hz, execution)
        if (step.passed and not verdict.meets_target) or step.latency_p50_ms > step.worst_p99_ms * (1 + RELATIVE):
            found.append(
                (
                    f"serving.capacity.steps.{index}",
                    f"a count passes on its slowest robot's p99: {step.robots} robots passed with p99 "
                    f"{step.worst_p99_ms:g} ms ({verdict.reason})",
                )
            )
            break
    return found
