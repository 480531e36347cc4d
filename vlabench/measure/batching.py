"""Dynamic batching: robots' requests wait in one queue; the server takes them oldest first, as many as the maximum
batch, waiting at most the maximum wait after the oldest arrived (Triton's ``max_queue_delay``, TorchServe's
``maxBatchDelay``), and never past a hard end (``flush_at_ns``: the end of a serving window). The queue is bounded:
a request beyond ``max_queued`` is refused at once (``BatcherFull``) instead of growing memory without limit. Every
batch served leaves a record of when it ran and how many rows it computed: the device's busy time."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class BatcherClosed(Exception):
    """The batcher was closed: no request is taken any more."""


class BatcherFull(Exception):
    """The queue holds its maximum: the request is refused (the server is overloaded)."""


@dataclass
class Request:
    """One robot's request: its payload, when it arrived, and (once served) its result and when it was served."""

    robot: int
    payload: Any
    arrived_ns: int
    started_ns: int = 0
    finished_ns: int = 0
    batch_size: int = 0
    rows: int = 0  # the rows its batch's inference computed (more than batch_size when padded)
    batch: int = -1  # the number of its batch in this batcher (0, 1, …)
    result: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    def wait(self, timeout_s: float | None = None) -> Any:
        """The result (raising the server's error for it); ``TimeoutError`` when it is not served in time."""
        if not self.done.wait(timeout_s):
            raise TimeoutError(f"robot {self.robot}'s request was not served within {timeout_s:g} s")
        if self.error is not None:
            raise self.error
        return self.result


@dataclass(frozen=True)
class BatchRecord:
    """One batch as it ran: its number, start and end (the clock's ns), the requests in it and the rows computed."""

    number: int
    start_ns: int
    end_ns: int
    size: int
    rows: int


class DynamicBatcher:
    """A FIFO queue of requests served in batches of at most ``max_batch``, each formed within ``max_wait_s`` of its
    oldest request's arrival (0: whatever is queued when the server asks); at most ``max_queued`` wait at once."""

    def __init__(
        self,
        max_batch: int,
        max_wait_s: float,
        clock: Callable[[], int] = time.perf_counter_ns,
        max_queued: int | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must not be negative, not {max_wait_s}")
        self.max_batch, self.max_wait_ns, self.clock = max_batch, int(max_wait_s * 1e9), clock
        self.max_queued = max_queued
        self._queue: deque[Request] = deque()
        self._changed = threading.Condition()
        self._closed = False
        self._batches = 0

    def submit(self, robot: int, payload: Any) -> Request:
        request = Request(robot, payload, self.clock())
        with self._changed:
            if self._closed:
                raise BatcherClosed("the server is shutting down")
            if self.max_queued is not None and len(self._queue) >= self.max_queued:
                raise BatcherFull(f"{len(self._queue)} requests already wait for a batch (at most {self.max_queued})")
            self._queue.append(request)
            self._changed.notify_all()
        return request

    def next_batch(self, timeout_s: float | None = None, flush_at_ns: int | None = None) -> list[Request]:
        """The next batch, oldest request first: blocks until a request arrives (``[]`` after ``timeout_s``, or at
        once when closed and empty), then until the batch is full, the oldest has waited ``max_wait_s``, or the clock
        reaches ``flush_at_ns`` (a hard end: what is queued then goes at once)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._queue or self._closed, timeout_s):
                return []
            if not self._queue:
                return []
            deadline_ns = self._queue[0].arrived_ns + self.max_wait_ns
            if flush_at_ns is not None:
                deadline_ns = min(deadline_ns, flush_at_ns)
            while len(self._queue) < self.max_batch and not self._closed:
                left_s = (deadline_ns - self.clock()) / 1e9
                if left_s <= 0:
                    break
                self._changed.wait(left_s)
            taken = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
            number, self._batches = self._batches, self._batches + 1
        started = self.clock()
        for request in taken:
            request.started_ns, request.batch_size, request.batch = started, len(taken), number
        return taken

    def pending(self) -> int:
        with self._changed:
            return len(self._queue)

    def close(self, error: BaseException | None = None) -> None:
        """Take no more requests; the queued ones fail with ``error`` (default: ``BatcherClosed``)."""
        with self._changed:
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            self._changed.notify_all()
        for request in left:
            fail(request, error or BatcherClosed("the server shut down before serving this request"))


Infer = Callable[[list[Any]], tuple[list[Any], int]]
"""Payloads → one result per payload, and the rows the inference computed (padding included)."""


def serve(batch: list[Request], infer: Infer, clock: Callable[[], int]) -> BatchRecord:
    """Run ``infer`` on the batch's payloads and hand each request its result (or the error ``infer`` raised); the
    record of the batch (a failed one computed no rows for anyone: its time still kept the device busy)."""
    started = batch[0].started_ns
    try:
        results, rows = infer([request.payload for request in batch])
    except Exception as exc:  # every request of the batch learns why; the server goes on
        for request in batch:
            fail(request, exc)
        return BatchRecord(batch[0].batch, started, clock(), len(batch), 0)
    finished = clock()
    for request, result in zip(batch, results, strict=True):
        request.result, request.finished_ns, request.rows = result, finished, rows
        request.done.set()
    return BatchRecord(batch[0].batch, started, finished, len(batch), rows)


def fail(request: Request, error: BaseException) -> None:
    request.error = error
    request.done.set()
