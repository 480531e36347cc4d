"""Several robots served by one policy instance: each robot asks for an action chunk every period (its own thread),
one dynamic batcher gathers the requests, the server runs them as batches. Every request's arrival, start and end
are kept; a request is late when its chunk came after the robot's previous one ran out (one period)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vlabench.measure.batching import BatcherClosed, DynamicBatcher, serve

Payloads = Callable[[int, int], Any]
"""(robot, request number) → what the robot sends."""


@dataclass(frozen=True)
class RobotsSettings:
    robots: int
    max_batch: int
    max_wait_s: float
    period_s: float  # each robot asks once per period: the time its previous chunk's actions (or one step) take
    duration_s: float


@dataclass(frozen=True)
class ServedRequest:
    """One request as the robot saw it (times in ns on the perf_counter clock; ``split`` for a remote server:
    encoding, network and server time, in ms)."""

    robot: int
    sent_ns: int
    arrived_ns: int
    started_ns: int
    finished_ns: int
    received_ns: int
    batch_size: int
    split: dict[str, float] = field(default_factory=dict)

    @property
    def latency_ms(self) -> float:
        return (self.received_ns - self.sent_ns) / 1e6

    @property
    def queue_ms(self) -> float:
        return (self.started_ns - self.arrived_ns) / 1e6

    @property
    def inference_ms(self) -> float:
        return (self.finished_ns - self.started_ns) / 1e6


@dataclass
class ServingMeasurement:
    settings: RobotsSettings
    requests: list[ServedRequest]
    duration_s: float
    failures: list[str] = field(default_factory=list)


def serve_robots(
    infer: Callable[[list[Any]], list[Any]], payloads: Payloads, settings: RobotsSettings
) -> ServingMeasurement:
    """Serve ``settings.robots`` robot threads for ``duration_s`` from this thread; robots start staggered over one
    period (their clocks are not aligned; over half the duration when the period is longer) and stop asking at the
    end; the requests in flight are still served."""
    clock = time.perf_counter_ns
    batcher = DynamicBatcher(settings.max_batch, settings.max_wait_s, clock)
    served: list[ServedRequest] = []
    failures: list[str] = []
    lock = threading.Lock()
    began = clock()
    end_ns = began + int(settings.duration_s * 1e9)
    period_ns = int(settings.period_s * 1e9)
    stagger_ns = min(period_ns, (end_ns - began) // 2)

    def robot(index: int) -> None:
        due = began + stagger_ns * index // settings.robots
        number = 0
        while due < end_ns:
            time.sleep(max(0.0, (due - clock()) / 1e9))
            sent = clock()
            try:
                request = batcher.submit(index, payloads(index, number))
                request.wait()
            except BatcherClosed:
                return
            except Exception as exc:
                with lock:
                    failures.append(f"robot {index}: {type(exc).__name__}: {exc}")
                return
            received = clock()
            entry = ServedRequest(
                index, sent, request.arrived_ns, request.started_ns, request.finished_ns, received, request.batch_size
            )
            with lock:
                served.append(entry)
            number += 1
            due = max(due + period_ns, received)  # a late chunk: ask again at once

    threads = [threading.Thread(target=robot, args=(index,), daemon=True) for index in range(settings.robots)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        batch = batcher.next_batch(timeout_s=0.05)
        if batch:
            serve(batch, infer, clock)
    batcher.close()
    return ServingMeasurement(
        settings, sorted(served, key=lambda entry: entry.sent_ns), (clock() - began) / 1e9, failures
    )
