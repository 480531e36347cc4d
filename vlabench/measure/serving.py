"""Several robots served by one policy instance. Each robot is a thread that asks for an action chunk, executes it
under its execution model and asks again; one dynamic batcher gathers the requests of robots served in this process
(a remote server has its own). Every request keeps its latency, where the time went, and how long the robot stalled
without an action to execute.

When a robot asks, by execution model (``P``: the period its reply's actions take at the control rate):

- ``per-step``: every ``P`` (one action per reply); it stalls for what the reply takes beyond ``P``.
- ``sync``: after executing the previous chunk; it stalls for the whole latency (it waits for every chunk).
- ``async``: as soon as it starts executing a chunk, so the next one is computed meanwhile; it stalls when that
  one arrives after the current chunk ran out (measured, not computed from the latency)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from vlabench.measure.batching import BatcherClosed, DynamicBatcher, Infer, serve

ExecutionMode = Literal["per-step", "sync", "async"]
clock = time.perf_counter_ns


@dataclass(frozen=True)
class RobotsSettings:
    robots: int
    max_batch: int
    max_wait_s: float
    period_s: float  # the time one reply's actions take at the control rate
    duration_s: float
    execution: ExecutionMode = "per-step"


@dataclass(frozen=True)
class Reply:
    """What serving one request took (ms): the wait in the batcher, the batch's inference, its size, and for a
    remote server the rest of the way (``split``: encoding, network, decoding)."""

    queue_ms: float
    inference_ms: float
    batch_size: int
    rows: int  # the rows the batch's inference computed: batch_size, or more when padded to a prepared size
    split: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ServedRequest:
    robot: int
    sent_ns: int  # perf_counter ns on the robot's side
    received_ns: int
    reply: Reply
    stall_ms: float = 0.0  # the robot had no action to execute

    @property
    def latency_ms(self) -> float:
        return (self.received_ns - self.sent_ns) / 1e6

    @property
    def queue_ms(self) -> float:
        return self.reply.queue_ms

    @property
    def inference_ms(self) -> float:
        return self.reply.inference_ms

    @property
    def batch_size(self) -> int:
        return self.reply.batch_size

    @property
    def rows(self) -> int:
        return self.reply.rows

    @property
    def split(self) -> dict[str, float]:
        return self.reply.split


@dataclass
class ServingMeasurement:
    settings: RobotsSettings
    requests: list[ServedRequest]
    duration_s: float
    failures: list[str] = field(default_factory=list)


Ask = Callable[[int, int], Reply]
"""(robot, request number) → the reply, blocking until it came (raising why it did not)."""


def drive_robots(ask: Ask, settings: RobotsSettings, pump: Callable[[], None] | None = None) -> ServingMeasurement:
    """Run the robot threads for ``duration_s`` (``pump``, if given, is called in this thread until they end: the
    in-process server runs its batches there); robots start staggered over one period (at most half the duration):
    their clocks are not aligned. A robot whose request fails stops, and the failure is reported."""
    served: list[ServedRequest] = []
    failures: list[str] = []
    lock = threading.Lock()
    began = clock()
    end_ns = began + int(settings.duration_s * 1e9)
    period_ns = int(settings.period_s * 1e9)
    stagger_ns = min(period_ns, (end_ns - began) // 2)

    def robot(index: int) -> None:
        due = began + stagger_ns * index // settings.robots
        executing_until: int | None = None  # async: when the chunk being executed runs out
        number = 0
        while due < end_ns:
            time.sleep(max(0.0, (due - clock()) / 1e9))
            sent = clock()
            try:
                reply = ask(index, number)
            except BatcherClosed:
                return
            except Exception as exc:
                with lock:
                    failures.append(f"robot {index}: {type(exc).__name__}: {exc}")
                return
            received = clock()
            if settings.execution == "sync":
                stall, due = received - sent, received + period_ns
            elif settings.execution == "async":
                deadline = received if executing_until is None else executing_until
                stall = max(0, received - deadline)
                start = max(received, deadline)
                executing_until, due = start + period_ns, start
            else:
                stall = max(0, received - sent - period_ns)
                due = max(sent + period_ns, received)
            with lock:
                served.append(ServedRequest(index, sent, received, reply, stall / 1e6))
            number += 1

    threads = [threading.Thread(target=robot, args=(index,), daemon=True) for index in range(settings.robots)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        if pump is None:
            time.sleep(0.05)
        else:
            pump()
    requests = sorted(served, key=lambda entry: entry.sent_ns)
    return ServingMeasurement(settings, requests, (clock() - began) / 1e9, failures)


def serve_robots(infer: Infer, payloads: Callable[[int, int], Any], settings: RobotsSettings) -> ServingMeasurement:
    """Robots served in this process: their requests go through one ``DynamicBatcher``; the batches run in this
    thread (where the policy was prepared and timed)."""
    batcher = DynamicBatcher(settings.max_batch, settings.max_wait_s, clock)

    def ask(robot: int, number: int) -> Reply:
        request = batcher.submit(robot, payloads(robot, number))
        request.wait()
        queue_ms = (request.started_ns - request.arrived_ns) / 1e6
        inference_ms = (request.finished_ns - request.started_ns) / 1e6
        return Reply(queue_ms, inference_ms, request.batch_size, request.rows)

    def pump() -> None:
        batch = batcher.next_batch(timeout_s=0.05)
        if batch:
            serve(batch, infer, clock)

    try:
        return drive_robots(ask, settings, pump)
    finally:
        batcher.close()
