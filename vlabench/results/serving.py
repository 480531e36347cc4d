"""The serving block of a run result (``--robots``): several robots served by one policy instance through a dynamic
batcher, in this process or over the network (``run --remote``), per robot and as a whole; the batches as they ran,
the device's busy share, the window's energy per action, and (``--robots auto``) the capacity search."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from vlabench.analysis.served_cost import ServedLoad
from vlabench.measure.serving import ServingMeasurement
from vlabench.measure.stats import Stats, summarize
from vlabench.results.capacity import CapacitySearch
from vlabench.results.serving_parts import (
    BatchLog,
    Freeze,
    PayloadBytes,
    ServedEnergy,
    Wire,
    batch_log,
    freezes,
    payload_bytes,
    summarize_split,
    wire_split,
)


class RobotServing(BaseModel):
    robot: int
    requests: int
    latency_p50_ms: float
    latency_p99_ms: float
    late_share: float = Field(description="share of its replies after which it stalled (no action to execute)")


class Link(BaseModel):
    """The link the requests crossed: emulated on loopback (``--link``), or the network as it was (None)."""

    name: str
    delay_ms: float = Field(ge=0, description="one way")
    jitter_ms: float = Field(ge=0)
    rate_mbps: float | None = Field(default=None, gt=0, description="None: not limited")
    loss: float = Field(ge=0, lt=1, description="share of segments lost (each resent after a timeout)")


class Encoding(BaseModel):
    """How the robots sent their camera frames."""

    format: Literal["jpeg", "png", "raw"]
    quality: int | None = Field(default=None, description="JPEG quality (1..95)")


class ServingResult(BaseModel):
    """Latency as each robot saw it (request sent, or due with open-loop arrivals, to chunk received), split into
    where the time went."""

    transport: Literal["in-process", "grpc"]
    execution: Literal["per-step", "sync", "async"] = Field(description="when each robot asks (measure/serving.py)")
    arrivals: Literal["closed", "poisson"] = Field(default="closed", description="closed or open loop (poisson)")
    status: Literal["complete", "partial"] = Field(default="complete", description="partial: the window ended early")
    stopped: str | None = Field(default=None, description="why the window ended before its duration")
    server: str | None = Field(default=None, description="HOST:PORT of the policy server (grpc)")
    robots: int = Field(gt=0)
    max_batch: int = Field(gt=0)
    max_wait_ms: float = Field(ge=0)
    request_period_ms: float = Field(gt=0, description="the time one reply's actions take at the control rate")
    actions_per_request: int = Field(default=1, gt=0, description="actions each reply delivers to its robot")
    duration_s: float = Field(gt=0, description="the serving window, first request to the last reply (or cut-off)")
    requests: int = Field(ge=0)
    unfinished: int = Field(default=0, ge=0, description="requests unanswered when the window closed")
    shed: int = Field(default=0, ge=0, description="open loop: requests due while their robot had too many waiting")
    batches: int = Field(ge=0)
    mean_batch: float = Field(ge=0)
    padded_share: float = Field(
        ge=0, le=1, description="rows computed as padding: a batch runs on the smallest prepared batch size it fits"
    )
    batch_sizes: list[int] = Field(default_factory=list, description="the batch sizes prepared (empty: not recorded)")
    busy_s: float | None = Field(default=None, ge=0, description="the batches' time: the device was busy")
    busy_fraction: float | None = Field(default=None, ge=0, le=1, description="busy time over the window")
    batch_log: BatchLog | None = None
    actions_per_s: float = Field(ge=0, description="actions delivered to all robots per second")
    inferences_per_s: float = Field(ge=0, description="batched inferences per second")
    late_share: float = Field(ge=0, le=1, description="share of replies after which the robot stalled")
    stall: Stats = Field(description="how long a robot had no action to execute after each reply (0: on time)")
    latency: Stats
    queue: Stats = Field(description="waiting in the server's batcher")
    inference: Stats = Field(description="the batch's inference on the server, pre- and postprocessing included")
    split_ms: dict[str, Stats] = Field(
        default_factory=dict,
        description="grpc: the robot's encoding, uplink, the server's decoding and reply encoding, downlink, the "
        "robot's decoding (queue and inference are above)",
    )
    payload_bytes: dict[str, PayloadBytes] = Field(default_factory=dict, description="grpc: request and reply")
    encoding: Encoding | None = None
    link: Link | None = None
    wire: Wire | None = None
    per_robot: list[RobotServing]
    energy: ServedEnergy | None = None
    joules_per_action: float | None = Field(
        default=None, description="per robot: the window's joules (batches and idle time) over the actions delivered"
    )
    freezes: list[Freeze] = Field(default_factory=list, description="replies so late the server looked frozen")
    failures: list[str] = Field(default_factory=list)
    capacity_robots: int | None = Field(default=None, ge=0, description="--robots auto: the largest count that passed")
    capacity: CapacitySearch | None = None

    def load(self) -> ServedLoad | None:
        """What the window measured for its cost (None without an energy measurement or a batch log)."""
        if self.energy is None or self.batch_log is None or not self.batches or not self.requests:
            return None
        return ServedLoad(
            robots=self.robots,
            window_s=self.duration_s,
            busy_s=self.batch_log.busy_s,
            requests=self.requests,
            batches=self.batches,
            actions=self.requests * self.actions_per_request,
            joules=self.energy.joules,
        )


def serving_result(
    measured: ServingMeasurement,
    *,
    transport: Literal["in-process", "grpc"],
    actions_per_request: int,
    server: str | None = None,
    batch_sizes: Sequence[int] = (),
    encoding: Encoding | None = None,
    link: Link | None = None,
    ping_ms: Stats | None = None,
) -> ServingResult:
    """Summarize the served requests (ValueError when none was served, with the robots' failures)."""
    settings, served, failures = measured.settings, measured.requests, measured.failures
    duration_s = measured.duration_s
    if not served:
        cut = f"{measured.unfinished} request(s) still unanswered when the window closed" if measured.unfinished else ""
        raise ValueError("no request was served: " + ("; ".join(failures) or cut or "the robots sent none"))
    robots, period_ms = settings.robots, settings.period_s * 1000.0
    per_robot = []
    for robot in range(robots):
        mine = [entry for entry in served if entry.robot == robot]
        if mine:
            p50, p99 = np.percentile([entry.latency_ms for entry in mine], [50, 99])
            late = sum(entry.stall_ms > 0 for entry in mine) / len(mine)
            per_robot.append(
                RobotServing(robot=robot, requests=len(mine), latency_p50_ms=p50, latency_p99_ms=p99, late_share=late)
            )
    log = batch_log(measured.batches) if measured.batches else None
    if log is not None:
        batches, in_batches = len(log.size), float(sum(log.size))
        padded = 1.0 - in_batches / max(in_batches, float(sum(log.rows)))
    else:  # each batch of n requests counted n times at 1/n
        sizes = np.array([entry.batch_size for entry in served], dtype=np.float64)
        batches, in_batches = round(float(np.sum(1.0 / sizes))), float(len(served))
        rows = float(np.sum([entry.rows / entry.batch_size for entry in served]))
        padded = max(0.0, 1.0 - len(served) / rows)
    wire, wire_ms = wire_split(served)
    if wire is not None:
        wire = wire.model_copy(update={"ping_ms": ping_ms})
    split = {name: [entry.split[name] for entry in served if name in entry.split] for name in _split_names(served)}
    partial = measured.stopped is not None or bool(failures)
    return ServingResult(
        transport=transport,
        execution=settings.execution,
        arrivals=settings.arrivals,
        status="partial" if partial else "complete",
        stopped=measured.stopped or ("robots failed: " + failures[0] if failures else None),
        server=server,
        robots=robots,
        max_batch=settings.max_batch,
        max_wait_ms=settings.max_wait_s * 1000.0,
        request_period_ms=period_ms,
        actions_per_request=actions_per_request,
        duration_s=duration_s,
        requests=len(served),
        unfinished=measured.unfinished,
        shed=measured.shed,
        batches=batches,
        mean_batch=in_batches / batches,
        padded_share=padded,
        batch_sizes=list(batch_sizes),
        busy_s=log.busy_s if log else None,
        busy_fraction=log.busy_s / duration_s if log else None,
        batch_log=log,
        actions_per_s=len(served) * actions_per_request / duration_s,
        inferences_per_s=batches / duration_s,
        late_share=sum(entry.stall_ms > 0 for entry in served) / len(served),
        stall=summarize([entry.stall_ms for entry in served]),
        latency=summarize([entry.latency_ms for entry in served]),
        queue=summarize([entry.queue_ms for entry in served]),
        inference=summarize([entry.inference_ms for entry in served]),
        split_ms=summarize_split({**split, **wire_ms}),
        payload_bytes=payload_bytes(served),
        encoding=encoding,
        link=link,
        wire=wire,
        per_robot=per_robot,
        freezes=freezes(served, measured.began_ns),
        failures=list(failures),
    )


def _split_names(served: Sequence) -> list[str]:
    return sorted({name for entry in served for name in entry.split})


def serving_warnings(serving: ServingResult | None) -> list[str]:
    """What a reader of a served result must know: a server that froze, a window cut short, requests lost."""
    if serving is None:
        return []
    found = []
    if serving.freezes:
        worst = max(serving.freezes, key=lambda freeze: freeze.latency_ms)
        least = min(freeze.latency_ms for freeze in serving.freezes)
        found.append(
            f"FROZEN: {len(serving.freezes)} repl(ies) took {least / 1000:.1f} s or more: the longest, "
            f"robot {worst.robot}'s at {worst.at_s:.1f} s into the window, is "
            f"{worst.latency_ms / serving.latency.p50:.0f}x the median; the server stalled (no queueing explains it)"
        )
    if serving.status == "partial":
        found.append(f"partial: {serving.stopped}; the {serving.requests} requests served are kept")
    if serving.unfinished:
        found.append(f"{serving.unfinished} request(s) were still unanswered when the window closed (not counted)")
    if serving.shed:
        found.append(f"{serving.shed} request(s) shed: their robot already had too many unanswered (open loop)")
    return found
