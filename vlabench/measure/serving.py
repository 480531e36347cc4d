"""Several robots served by one policy instance. Each robot asks for action chunks under its execution model; one
dynamic batcher gathers the requests of robots served in this process (a remote server has its own). Every request
keeps its latency, where the time went, and how long the robot stalled without an action to execute.

When a robot asks, by execution model (``P``: the period its reply's actions take at the control rate):

- ``per-step``: every ``P`` (one action per reply); it stalls for what the reply takes beyond ``P``.
- ``sync``: after executing the previous chunk; it stalls for the whole latency (it waits for every chunk).
- ``async``: as soon as it starts executing a chunk, so the next one is computed meanwhile; it stalls when that
  one arrives after the current chunk ran out (measured, not computed from the latency).

Those are closed-loop arrivals (a robot's next request waits for its reply). With ``poisson`` arrivals (open loop)
each robot's requests come at random times, ``P`` apart on average, whether or not the previous one was answered:
latency counts from when a request was due (the client's own queueing included), a request due while the robot
already has ``OUTSTANDING_PER_ROBOT`` unanswered is shed (counted: the server fell behind), and the stall is what a
reply takes beyond ``P``.

The serving window is a hard bound: no request is sent after ``duration_s``, and what is still in flight
``grace_s`` later is abandoned and counted (``unfinished``). Ctrl-C or SIGTERM ends it early, keeping what was
served (``stopped`` says why)."""

from __future__ import annotations

import heapq
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from vlabench.measure.batching import BatcherClosed, BatchRecord, DynamicBatcher, Infer, serve

ExecutionMode = Literal["per-step", "sync", "async"]
Arrivals = Literal["closed", "poisson"]
clock = time.perf_counter_ns
OUTSTANDING_PER_ROBOT = 4
"""Open loop: unanswered requests one robot may have; one more due is shed."""
MAX_CLIENT_WORKERS = 256
"""Open loop: threads sending requests at once, whatever the robot count."""
MIN_GRACE_S = 1.0


@dataclass(frozen=True)
class RobotsSettings:
    robots: int
    max_batch: int
    max_wait_s: float
    period_s: float  # the time one reply's actions take at the control rate
    duration_s: float
    execution: ExecutionMode = "per-step"
    arrivals: Arrivals = "closed"
    seed: int = 0  # open loop: the arrival times

    @property
    def grace_s(self) -> float:
        """How long after the window requests in flight may still finish (one period, at least a second): the
        batcher's wait never stretches it."""
        return max(MIN_GRACE_S, self.period_s)

    @property
    def threads(self) -> int:
        """Threads the robots need besides the caller's: one per robot closed-loop; open loop, a scheduler and its
        senders."""
        if self.arrivals == "closed":
            return self.robots
        return 1 + min(MAX_CLIENT_WORKERS, self.robots * OUTSTANDING_PER_ROBOT)


@dataclass(frozen=True)
class Reply:
    """What serving one request took (ms): the wait in the batcher, the batch's inference, its size, and for a
    remote server the rest of the way (``split``: encoding, the link each way, decoding), the batch that served it
    and the bytes each way."""

    queue_ms: float
    inference_ms: float
    batch_size: int
    rows: int  # the rows the batch's inference computed: batch_size, or more when padded to a prepared size
    split: dict[str, float] = field(default_factory=dict)
    batch: BatchRecord | None = None
    request_bytes: int = 0
    reply_bytes: int = 0
    stamps: tuple[int, int, int, int] | None = None  # unix ns: client sent, server received, server sent, received


@dataclass(frozen=True)
class ServedRequest:
    robot: int
    sent_ns: int  # perf_counter ns on the robot's side (open loop: when the request was due)
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
    batches: list[BatchRecord] = field(default_factory=list)  # every batch that ran in the window
    began_ns: int = 0
    stopped: str | None = None  # why serving ended before its duration (Ctrl-C, SIGTERM); None: it ran out
    unfinished: int = 0  # requests still unanswered when the window closed (abandoned, not served)
    shed: int = 0  # open loop: requests due while their robot had the most unanswered
    errors: list[BaseException] = field(default_factory=list, repr=False)  # the failures' exceptions


Ask = Callable[[int, int], Reply]
"""(robot, request number) → the reply, blocking until it came (raising why it did not)."""


@contextmanager
def interruptible() -> Iterator[dict[str, str]]:
    """Ctrl-C and SIGTERM end the window while it is open (in the main thread only): the signal is noted in the
    yielded dict (``how``), never raised, so the loop stops between two batches and every request a robot was
    answered has its batch on record (an exception landing inside a batch lost its record)."""
    noted: dict[str, str] = {}
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(signum: int, frame: Any) -> None:
        noted["how"] = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"

    previous = {signum: signal.signal(signum, note) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield noted
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Window:
    """The shared state of one serving window: what was served, what failed, what is in flight."""

    def __init__(self, settings: RobotsSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.served: list[ServedRequest] = []
        self.failures: list[str] = []
        self.errors: list[BaseException] = []
        self.in_flight = 0
        self.shed = 0
        self.halt = threading.Event()
        self.began = clock()
        self.end_ns = self.began + int(settings.duration_s * 1e9)

    def ask(self, ask: Ask, robot: int, number: int) -> Reply | None:
        """The reply, or None when the request failed (recorded) or was cut off by the end of the window."""
        with self.lock:
            self.in_flight += 1
        try:
            return ask(robot, number)
        except BatcherClosed:
            return None
        except Exception as exc:
            if not self.halt.is_set():
                with self.lock:
                    self.failures.append(f"robot {robot}: {type(exc).__name__}: {exc}")
                    self.errors.append(exc)
            return None
        finally:
            with self.lock:
                self.in_flight -= 1

    def record(self, entry: ServedRequest) -> None:
        with self.lock:
            self.served.append(entry)


def closed_loop_robot(window: Window, ask: Ask, index: int) -> None:
    """One robot asking under its execution model until the window ends (or its request fails)."""
    settings = window.settings
    period_ns = int(settings.period_s * 1e9)
    stagger_ns = min(period_ns, (window.end_ns - window.began) // 2)
    due = window.began + stagger_ns * index // settings.robots
    executing_until: int | None = None  # async: when the chunk being executed runs out
    number = 0
    while due < window.end_ns and not window.halt.is_set():
        time.sleep(max(0.0, (due - clock()) / 1e9))
        sent = clock()
        reply = window.ask(ask, index, number)
        if reply is None:
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
        window.record(ServedRequest(index, sent, received, reply, stall / 1e6))
        number += 1


def open_loop_arrivals(window: Window, ask: Ask, pool: ThreadPoolExecutor) -> None:
    """Every robot's requests at exponentially distributed intervals (mean: the period), each sent by the pool."""
    settings = window.settings
    rng = random.Random(settings.seed)
    mean_ns = settings.period_s * 1e9
    due = [(window.began + int(rng.expovariate(1.0) * mean_ns), robot) for robot in range(settings.robots)]
    heapq.heapify(due)
    outstanding = [0] * settings.robots
    numbers = [0] * settings.robots
    failed: set[int] = set()
    lock = threading.Lock()

    def send(robot: int, number: int, when: int) -> None:
        reply = window.ask(ask, robot, number)
        received = clock()
        with lock:
            outstanding[robot] -= 1
            if reply is None:
                failed.add(robot)
        if reply is not None:
            stall = max(0, received - when - int(mean_ns))
            window.record(ServedRequest(robot, when, received, reply, stall / 1e6))

    while due and not window.halt.is_set():
        when, robot = heapq.heappop(due)
        if when >= window.end_ns:
            break
        time.sleep(max(0.0, (when - clock()) / 1e9))
        with lock:
            if robot in failed:
                continue
            if outstanding[robot] >= OUTSTANDING_PER_ROBOT:
                window.shed += 1
            else:
                outstanding[robot] += 1
                pool.submit(send, robot, numbers[robot], when)
                numbers[robot] += 1
        heapq.heappush(due, (when + int(rng.expovariate(1.0) * mean_ns), robot))


def drive_robots(
    ask: Ask,
    settings: RobotsSettings,
    pump: Callable[[int], BatchRecord | None] | None = None,
    abandon: Callable[[], None] | None = None,
) -> ServingMeasurement:
    """Serve the robots for ``duration_s``: ``pump(end_ns)``, if given, is called in this thread until they end (the
    in-process server runs its batches there, none waiting past ``end_ns``); ``grace_s`` after the window, or at
    Ctrl-C or SIGTERM, ``abandon`` cuts off what is still in flight. Closed-loop robots start staggered over one
    period (at most half the duration): their clocks are not aligned. A robot whose request fails stops, and the
    failure is reported."""
    window = Window(settings)
    batches: list[BatchRecord] = []
    pool = None
    if settings.arrivals == "closed":
        threads = [
            threading.Thread(target=closed_loop_robot, args=(window, ask, index), daemon=True)
            for index in range(settings.robots)
        ]
    else:
        pool = ThreadPoolExecutor(settings.threads - 1, thread_name_prefix="vlabench-robot")
        threads = [threading.Thread(target=open_loop_arrivals, args=(window, ask, pool), daemon=True)]
    stopped = None
    hard_end = window.end_ns + int(settings.grace_s * 1e9)
    with interruptible() as signalled:
        try:
            for thread in threads:
                thread.start()
            while (
                "how" not in signalled
                and clock() < hard_end
                and (any(thread.is_alive() for thread in threads) or (pool is not None and window.in_flight))
            ):
                if pump is None:
                    time.sleep(0.02)
                elif (record := pump(window.end_ns)) is not None:
                    batches.append(record)
            if "how" in signalled:
                seconds = (clock() - window.began) / 1e9
                stopped = f"interrupted ({signalled['how']}) after {seconds:.1f} s of {settings.duration_s:g} s"
        finally:
            window.halt.set()
            if abandon is not None:
                abandon()
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
    ended = clock()
    for thread in threads:
        thread.join(timeout=1.0)
    with window.lock:
        requests = sorted(window.served, key=lambda entry: entry.sent_ns)
        return ServingMeasurement(
            settings,
            requests,
            (ended - window.began) / 1e9,
            list(window.failures),
            batches,
            window.began,
            stopped,
            window.in_flight,
            window.shed,
            list(window.errors),
        )


def serve_robots(
    infer: Infer,
    payloads: Callable[[int, int], Any],
    settings: RobotsSettings,
    on_window: Callable[[bool], None] | None = None,
) -> ServingMeasurement:
    """Robots served in this process: their requests go through one bounded ``DynamicBatcher``; the batches run in
    this thread (where the policy was prepared and timed). ``on_window(True)`` is called as the window opens and
    ``on_window(False)`` as it closes (an energy meter's window)."""
    queued = settings.robots * (1 if settings.arrivals == "closed" else OUTSTANDING_PER_ROBOT)
    batcher = DynamicBatcher(settings.max_batch, settings.max_wait_s, clock, max_queued=queued)

    def ask(robot: int, number: int) -> Reply:
        request = batcher.submit(robot, payloads(robot, number))
        request.wait()
        queue_ms = (request.started_ns - request.arrived_ns) / 1e6
        inference_ms = (request.finished_ns - request.started_ns) / 1e6
        return Reply(queue_ms, inference_ms, request.batch_size, request.rows)

    def pump(end_ns: int) -> BatchRecord | None:
        batch = batcher.next_batch(timeout_s=0.02, flush_at_ns=end_ns)
        return serve(batch, infer, clock) if batch else None

    if on_window:
        on_window(True)
    try:
        measured = drive_robots(ask, settings, pump, lambda: batcher.close())
    finally:
        batcher.close()
        if on_window:
            on_window(False)
    return measured
