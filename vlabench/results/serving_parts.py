"""Parts of the serving block that say where a served window's time, bytes and energy went: the batches as they ran
(the device's busy time), the window's energy shared over them and the idle time, the bytes each way, the link's
one-way times with the clocks' offset, and the replies so late the server looked frozen."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from vlabench.measure.batching import BatchRecord
from vlabench.measure.serving import ServedRequest
from vlabench.measure.stats import Stats, summarize

FREEZE_MIN_MS = 1000.0
FREEZE_FACTOR = 10.0
"""A reply is a freeze when it took at least a second and ten times the median reply: no queueing explains it."""
MAX_FREEZES_KEPT = 20


class BatchLog(BaseModel):
    """Every batch of the window, in the order they ran (columns of equal length): start (ms after the first
    batch's start), duration (ms), requests in it, rows computed (padding included; 0: its inference failed), and
    its share of the window's energy (J; empty without an energy measurement)."""

    start_ms: list[float]
    duration_ms: list[float]
    size: list[int]
    rows: list[int]
    joules: list[float] = Field(default_factory=list)

    @property
    def busy_s(self) -> float:
        return float(sum(self.duration_ms)) / 1000.0


def batch_log(records: Sequence[BatchRecord]) -> BatchLog:
    ordered = sorted(records, key=lambda record: record.start_ns)
    first = ordered[0].start_ns if ordered else 0
    return BatchLog(
        start_ms=[(record.start_ns - first) / 1e6 for record in ordered],
        duration_ms=[(record.end_ns - record.start_ns) / 1e6 for record in ordered],
        size=[record.size for record in ordered],
        rows=[record.rows for record in ordered],
    )


class ServedEnergy(BaseModel):
    """The window's energy: the batches' share (in the batch log) and the idle time's, over the window."""

    label: Literal["measured", "estimated"]
    method: str = Field(description="how the window's joules were found")
    window_s: float = Field(gt=0)
    joules: float = Field(ge=0, description="the whole window: batches and idle time")
    idle_w: float = Field(ge=0, description="idle power (the energy pass's idle window)")
    idle_joules: float = Field(ge=0, description="the idle time's share: at most idle power × the time not busy")


def share_energy(log: BatchLog, joules: float, idle_w: float, window_s: float) -> tuple[BatchLog, float]:
    """The window's ``joules`` split into the idle time's share (idle power × the time no batch ran, at most the
    whole) and each batch's (the rest, by its duration): the log with its joules, and the idle share."""
    busy_s = log.busy_s
    idle = min(joules, idle_w * max(0.0, window_s - busy_s))
    busy = joules - idle
    shares = [busy * duration / 1000.0 / busy_s if busy_s > 0 else 0.0 for duration in log.duration_ms]
    if busy_s <= 0:
        idle = joules  # no batch ran: all of it was idle
    return log.model_copy(update={"joules": shares}), idle


class PayloadBytes(BaseModel):
    """Bytes of one message on the wire (gRPC's framing aside)."""

    mean: float = Field(ge=0)
    min: int = Field(ge=0)
    max: int = Field(ge=0)


def payload_bytes(served: Sequence[ServedRequest]) -> dict[str, PayloadBytes]:
    sizes = {
        "request": [entry.reply.request_bytes for entry in served],
        "reply": [entry.reply.reply_bytes for entry in served],
    }
    return {
        name: PayloadBytes(mean=float(np.mean(values)), min=min(values), max=max(values))
        for name, values in sizes.items()
        if values and max(values) > 0
    }


class Wire(BaseModel):
    """The link's time apart from the server's: each request's four timestamps (sent, received by the server's
    handler, sent back, received) with the two clocks' offset estimated from the request with the shortest round
    trip (NTP's estimate; its uncertainty is half that round trip). Uplink and downlink (``split_ms``) include both
    gRPC stacks; ``ping_ms`` is an empty call's round trip on the same channel, before serving."""

    clock_offset_ms: float = Field(description="server clock minus robot clock")
    offset_uncertainty_ms: float = Field(ge=0)
    ping_ms: Stats | None = None


def wire_split(served: Sequence[ServedRequest]) -> tuple[Wire | None, dict[str, list[float]]]:
    """The clock offset and each request's uplink and downlink (ms), from the requests that carry timestamps."""
    stamped = [entry.reply.stamps for entry in served if entry.reply.stamps is not None]
    if not stamped:
        return None, {}
    stamps = np.array(stamped, dtype=np.float64)
    sent, arrived, left, received = stamps.T
    round_trip = (received - sent) - (left - arrived)
    best = int(np.argmin(round_trip))
    offset = ((arrived[best] - sent[best]) + (left[best] - received[best])) / 2
    wire = Wire(clock_offset_ms=offset / 1e6, offset_uncertainty_ms=max(0.0, round_trip[best]) / 2e6)
    uplink = ((arrived - sent) - offset) / 1e6
    downlink = ((received - left) + offset) / 1e6
    return wire, {"uplink": uplink.tolist(), "downlink": downlink.tolist()}


class Freeze(BaseModel):
    """A reply so late the server looked frozen: which robot, when it asked (s into the window), how long it took."""

    robot: int
    at_s: float
    latency_ms: float


def freezes(served: Sequence[ServedRequest], began_ns: int) -> list[Freeze]:
    """Replies of at least ``FREEZE_MIN_MS`` and ``FREEZE_FACTOR`` times the median (the first ``MAX_FREEZES_KEPT``)."""
    if not served:
        return []
    median = float(np.median([entry.latency_ms for entry in served]))
    threshold = max(FREEZE_MIN_MS, FREEZE_FACTOR * median)
    late = [entry for entry in served if entry.latency_ms >= threshold]
    return [
        Freeze(robot=entry.robot, at_s=(entry.sent_ns - began_ns) / 1e9, latency_ms=entry.latency_ms)
        for entry in late[:MAX_FREEZES_KEPT]
    ]


def summarize_split(split: dict[str, list[float]]) -> dict[str, Stats]:
    return {name: summarize(values) for name, values in split.items() if values}
