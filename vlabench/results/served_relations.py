"""The serving block (``--robots``, ``run --remote``) against the model of a served run: each robot sends one request
at a time, at most one per period of its reply's actions (two at the start of an async chunk), and waits for the
reply; one policy instance runs the batches one after another; a request's latency holds its wait in the batcher,
its batch's inference and, over the network, its encoding, transfer and decoding; a robot stalls for at most its
latency. Every figure of the block is computed again from its requests and settings and compared.

These are the rules of the block's fields as of schema 1.5; rules of fields added since live in modules of their
own, listed in ``results.relations.BLOCK_RULES``.
"""

from __future__ import annotations

from itertools import pairwise

from vlabench.measure.stats import Stats
from vlabench.results.relation_terms import (
    ABSOLUTE_MS,
    EXACT,
    RELATIVE,
    Problems,
    RunResult,
    at_most,
    close,
)
from vlabench.results.stats_relations import ORDER_STATISTICS, summary_problems

LATENCIES = ("latency", "inference")
"""Statistics of the block that are latencies (> 0); the others (queue, stall, the network split) are waits (≥ 0)."""
WAITS = ("queue", "stall")


def served_stats(served) -> list[tuple[str, Stats, bool]]:
    """The block's statistics: (name, statistics, whether 0 is a possible value: a wait)."""
    named = [(name, getattr(served, name), name in WAITS) for name in (*LATENCIES, *WAITS)]
    return named + [(f"split_ms.{name}", stats, True) for name, stats in served.split_ms.items()]


def serving_relations(result: RunResult) -> Problems:
    """Every rule of the serving block, its statistics' own first (the others compare figures that must be
    possible). Their ranges (finite, ordered, ≥ 0) are checked with the other figures' (``RunResult``)."""
    served = result.serving
    if served is None:
        return []
    found = [
        problem for name, stats, _ in served_stats(served) for problem in summary_problems(f"serving.{name}", stats)
    ]
    if found:
        return found
    return [
        *_count_problems(served),
        *_robot_problems(served),
        *_batch_problems(served),
        *_rate_problems(result),
        *_latency_problems(served),
        *_stall_problems(served),
        *_energy_problems(result),
    ]


def _count_problems(served) -> Problems:
    """One latency, wait, inference and stall per request (the network split: at most one)."""
    found = [
        (f"serving.{name}.count", f"one entry per request: {stats.count} {name} entries for {served.requests} requests")
        for name, stats in [(name, getattr(served, name)) for name in (*LATENCIES, *WAITS)]
        if stats.count != served.requests
    ]
    found += [
        (f"serving.split_ms.{name}.count", f"one entry per request: {stats.count} entries for {served.requests}")
        for name, stats in served.split_ms.items()
        if stats.count > served.requests
    ]
    return found


def _robot_problems(served) -> Problems:
    """A row per robot served (each robot that did not fail has one), numbered within the robots, their requests
    summing to the block's, each robot's percentiles within the block's min..max, the late shares weighing in."""
    rows, found = served.per_robot, []
    numbers = [row.robot for row in rows]
    expected = f"{served.robots} robots" + (f", {len(served.failures)} failed" if served.failures else "")
    if len(rows) > served.robots or (not served.failures and len(rows) != served.robots):
        found.append(("serving.per_robot", f"a row per robot: {len(rows)} rows for {expected}"))
    elif len(set(numbers)) != len(numbers) or any(not 0 <= number < served.robots for number in numbers):
        found.append(("serving.per_robot", f"a row per robot: robots numbered {numbers} among {served.robots}"))
    elif sum(row.requests for row in rows) != served.requests:
        total = sum(row.requests for row in rows)
        found.append(("serving.per_robot", f"a row per robot: their {total} requests, the block's {served.requests}"))
    latency = served.latency
    for index, row in enumerate(rows):
        values = (latency.min, row.latency_p50_ms, row.latency_p99_ms, latency.max)
        if row.requests < 1 or any(a > b * (1 + EXACT) for a, b in pairwise(values)):
            found.append(
                (
                    f"serving.per_robot.{index}",
                    f"a row per robot: robot {row.robot}'s p50 {row.latency_p50_ms:g} ≤ p99 {row.latency_p99_ms:g} "
                    f"ms over {row.requests} requests must lie in the block's {latency.min:g}..{latency.max:g} ms",
                )
            )
            break
    if rows and served.requests and not found:
        weighted = sum(row.late_share * row.requests for row in rows) / served.requests
        if not close(weighted, served.late_share, 1e-6):
            found.append(
                (
                    "serving.late_share",
                    f"a row per robot: a late share of {served.late_share:g}, its robots' weigh in at {weighted:g}",
                )
            )
    return found


def _batch_problems(served) -> Problems:
    """Batches of 1..max batch requests; mean batch = requests ÷ batches; batches run one after another, each at
    least the fastest inference long."""
    found = []
    if served.requests and not 1 - EXACT <= served.mean_batch <= served.max_batch * (1 + EXACT):
        found.append(
            (
                "serving.mean_batch",
                f"batches of the requests: a mean batch of {served.mean_batch:g} with batches of 1 to "
                f"{served.max_batch}",
            )
        )
        return found
    if served.requests and served.mean_batch > 0:
        batches = served.requests / served.mean_batch  # before rounding
        if abs(batches - served.batches) > 0.5 + EXACT * batches:
            found.append(
                (
                    "serving.batches",
                    f"batches of the requests: {served.batches} batches, {served.requests} requests at a mean batch of "
                    f"{served.mean_batch:g} are {batches:g}",
                )
            )
        least_s = served.batches * served.inference.min / 1000.0
        if not at_most(least_s, served.duration_s, ABSOLUTE_MS / 1000):
            found.append(
                (
                    "serving.batches",
                    f"batches one after another: {served.batches} batches of at least {served.inference.min:g} ms take "
                    f"{least_s:g} s, more than the {served.duration_s:g} s served",
                )
            )
    return found


def _rate_problems(result: RunResult) -> Problems:
    """Actions/s = requests × actions per reply ÷ duration; inferences/s = batches ÷ duration; a robot asks once per
    period of its reply's actions (at most two more: the first, and an async chunk's next), and one request at a
    time (its requests' latencies sum to at most the duration)."""
    served, control, found = result.serving, result.control, []
    per_reply = control.execution_model().actions_per_inference
    period_ms = 1000.0 * per_reply / control.control_hz
    if not close(served.request_period_ms, period_ms, EXACT):
        found.append(
            (
                "serving.request_period_ms",
                f"a request per period: {served.request_period_ms:g} ms recorded, {per_reply} actions at "
                f"{control.control_hz:g} Hz take {period_ms:g} ms",
            )
        )
    actions = served.requests * per_reply / served.duration_s
    if not close(served.actions_per_s, actions, EXACT):
        found.append(
            (
                "serving.actions_per_s",
                f"actions from the requests: {served.actions_per_s:g} actions/s recorded, {served.requests} replies of "
                f"{per_reply} actions in {served.duration_s:g} s are {actions:g}",
            )
        )
    if served.requests and served.mean_batch > 0:
        inferences = served.requests / served.mean_batch / served.duration_s
        if not close(served.inferences_per_s, inferences, EXACT):
            found.append(
                (
                    "serving.inferences_per_s",
                    f"actions from the requests: {served.inferences_per_s:g} inferences/s recorded, "
                    f"{served.requests} requests in batches of {served.mean_batch:g} over {served.duration_s:g} s "
                    f"are {inferences:g}",
                )
            )
    asked_s = max(served.duration_s, result.config.serve_duration_s or 0.0)
    most = served.robots * (asked_s * 1000.0 / served.request_period_ms + 2)
    if served.requests > most:
        found.append(
            (
                "serving.requests",
                f"requests the robots can send: {served.requests} requests from {served.robots} robots asking once "
                f"per {served.request_period_ms:g} ms for {asked_s:g} s (at most {most:g})",
            )
        )
    busy_s = served.requests * served.latency.mean / 1000.0
    if not at_most(busy_s, served.robots * served.duration_s, ABSOLUTE_MS / 1000):
        found.append(
            (
                "serving.requests",
                f"requests the robots can send: {served.requests} requests of {served.latency.mean:g} ms on average "
                f"take {busy_s:g} robot-seconds, more than {served.robots} robots waiting one at a time for "
                f"{served.duration_s:g} s",
            )
        )
    if isinstance(result.config.robots, int) and result.config.robots != served.robots:  # not a capacity search
        found.append(("serving.robots", f"robots of the run: {served.robots} served, {result.config.robots} asked for"))
    return found


def _latency_problems(served) -> Problems:
    """A request's latency holds its wait and its batch's inference, percentile by percentile (each request's parts
    lie inside its latency, and order statistics keep that); on average also its encoding, transfer and decoding."""
    latency, found = served.latency, []
    for name in ("inference", "queue"):
        part = getattr(served, name)
        for stat in ORDER_STATISTICS:
            inner, outer = getattr(part, stat), getattr(latency, stat)
            if not at_most(inner, outer, ABSOLUTE_MS):
                found.append(
                    (
                        f"serving.{name}.{stat}",
                        f"latency holds the server's time: a robot's {stat} latency of {outer:g} ms, shorter than "
                        f"the {name} {stat} of {inner:g} ms inside it",
                    )
                )
                break
    parts = served.queue.mean + served.inference.mean + sum(stats.mean for stats in served.split_ms.values())
    if not found and not at_most(parts, latency.mean, ABSOLUTE_MS * (2 + len(served.split_ms))):
        found.append(
            (
                "serving.latency.mean",
                f"latency holds the server's time: a mean latency of {latency.mean:g} ms, shorter than the "
                f"{parts:g} ms of its parts",
            )
        )
    return found


def _stall_problems(served) -> Problems:
    """A robot stalls for at most its latency (sync: exactly its latency; per step: what exceeds the period); a late
    share of 0 without stalls, of 1 when every reply stalled."""
    stall, latency, found = served.stall, served.latency, []
    for stat in ORDER_STATISTICS:
        if not at_most(getattr(stall, stat), getattr(latency, stat), ABSOLUTE_MS):
            found.append(
                (
                    f"serving.stall.{stat}",
                    f"stalls within the latency: a {stat} stall of {getattr(stall, stat):g} ms, a {stat} latency of "
                    f"{getattr(latency, stat):g} ms",
                )
            )
            return found
    expected = None
    if served.execution == "sync":
        expected = latency.max
    elif served.execution == "per-step":
        expected = max(0.0, latency.max - served.request_period_ms)
    if expected is not None and not close(stall.max, expected, ABSOLUTE_MS):
        found.append(
            (
                "serving.stall.max",
                f"stalls within the latency: the longest stall is {stall.max:g} ms, the {served.execution} robots' "
                f"longest latency of {latency.max:g} ms gives {expected:g} ms",
            )
        )
    late = served.late_share
    if (stall.max == 0 and late > 0) or (stall.min > 0 and late < 1):
        found.append(
            (
                "serving.late_share",
                f"stalls within the latency: {late:.0%} of replies late with stalls of {stall.min:g}..{stall.max:g} ms",
            )
        )
    return found


def _energy_problems(result: RunResult) -> Problems:
    """Energy per action per robot: the energy pass's joules per inference over the mean batch's actions (a
    window with its own energy and batch log is held to that instead, by ``serving_relations``)."""
    served, energy = result.serving, result.energy
    if energy is None or served.joules_per_action is None or not served.mean_batch > 0 or served.load() is not None:
        return []
    actions = served.mean_batch * result.control.execution_model().actions_per_inference
    expected = energy.joules_per_inference / actions
    if close(served.joules_per_action, expected, EXACT, RELATIVE):
        return []
    return [
        (
            "serving.joules_per_action",
            f"energy per action per robot: {served.joules_per_action:g} J recorded, {energy.joules_per_inference:g} J "
            f"per inference over {actions:g} actions (a mean batch of {served.mean_batch:g}) is {expected:g} J",
        )
    ]
