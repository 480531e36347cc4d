"""The serving block of a run result (``--robots``): several robots served by one policy instance through a dynamic
batcher, in this process or over the network (``run --remote``), per robot and as a whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from vlabench.measure.serving import ServingMeasurement
from vlabench.measure.stats import Stats, summarize


class RobotServing(BaseModel):
    robot: int
    requests: int
    latency_p50_ms: float
    latency_p99_ms: float
    late_share: float = Field(description="share of its replies after which it stalled (no action to execute)")


class ServingResult(BaseModel):
    """Latency as each robot saw it (request sent to chunk received), split into where the time went."""

    transport: Literal["in-process", "grpc"]
    execution: Literal["per-step", "sync", "async"] = Field(description="when each robot asks (measure/serving.py)")
    server: str | None = Field(default=None, description="HOST:PORT of the policy server (grpc)")
    robots: int = Field(gt=0)
    max_batch: int = Field(gt=0)
    max_wait_ms: float = Field(ge=0)
    request_period_ms: float = Field(gt=0, description="the time one reply's actions take at the control rate")
    duration_s: float = Field(gt=0)
    requests: int = Field(ge=0)
    batches: int = Field(ge=0)
    mean_batch: float = Field(ge=0)
    padded_share: float = Field(
        ge=0, le=1, description="rows computed as padding: a batch runs on the smallest prepared batch size it fits"
    )
    batch_sizes: list[int] = Field(default_factory=list, description="the batch sizes prepared (empty: not recorded)")
    actions_per_s: float = Field(ge=0, description="actions delivered to all robots per second")
    inferences_per_s: float = Field(ge=0, description="batched inferences per second")
    late_share: float = Field(ge=0, le=1, description="share of replies after which the robot stalled")
    stall: Stats = Field(description="how long a robot had no action to execute after each reply (0: on time)")
    latency: Stats
    queue: Stats = Field(description="waiting in the server's batcher")
    inference: Stats = Field(description="the batch's inference on the server, pre- and postprocessing included")
    split_ms: dict[str, Stats] = Field(
        default_factory=dict, description="grpc: the client's encoding, the network (both ways) and decoding"
    )
    per_robot: list[RobotServing]
    joules_per_action: float | None = Field(
        default=None, description="per robot: the energy pass's joules per inference over the mean batch's actions"
    )
    failures: list[str] = Field(default_factory=list)


def serving_result(
    measured: ServingMeasurement,
    *,
    transport: Literal["in-process", "grpc"],
    actions_per_request: int,
    server: str | None = None,
    batch_sizes: Sequence[int] = (),
) -> ServingResult:
    """Summarize the served requests (ValueError when none was served, with the robots' failures)."""
    settings, served, failures = measured.settings, measured.requests, measured.failures
    duration_s = measured.duration_s
    if not served:
        raise ValueError("no request was served: " + ("; ".join(failures) or "the robots sent none"))
    robots, period_ms = settings.robots, settings.period_s * 1000.0
    sizes = np.array([entry.batch_size for entry in served], dtype=np.float64)
    batches = float(np.sum(1.0 / sizes))  # each batch of n requests counted n times at 1/n
    per_robot = []
    for robot in range(robots):
        mine = [entry.latency_ms for entry in served if entry.robot == robot]
        if mine:
            p50, p99 = np.percentile(mine, [50, 99])
            late = sum(entry.stall_ms > 0 for entry in served if entry.robot == robot) / len(mine)
            per_robot.append(
                RobotServing(
                    robot=robot,
                    requests=len(mine),
                    latency_p50_ms=float(p50),
                    latency_p99_ms=float(p99),
                    late_share=late,
                )
            )
    splits = sorted({name for entry in served for name in entry.split})
    return ServingResult(
        transport=transport,
        execution=settings.execution,
        server=server,
        robots=robots,
        max_batch=settings.max_batch,
        max_wait_ms=settings.max_wait_s * 1000.0,
        request_period_ms=period_ms,
        duration_s=duration_s,
        requests=len(served),
        batches=round(batches),
        mean_batch=len(served) / batches,
        padded_share=max(0.0, 1.0 - len(served) / float(np.sum([entry.rows / entry.batch_size for entry in served]))),
        batch_sizes=list(batch_sizes),
        actions_per_s=len(served) * actions_per_request / duration_s,
        inferences_per_s=batches / duration_s,
        late_share=sum(entry.stall_ms > 0 for entry in served) / len(served),
        stall=summarize([entry.stall_ms for entry in served]),
        latency=summarize([entry.latency_ms for entry in served]),
        queue=summarize([entry.queue_ms for entry in served]),
        inference=summarize([entry.inference_ms for entry in served]),
        split_ms={name: summarize([entry.split[name] for entry in served if name in entry.split]) for name in splits},
        per_robot=per_robot,
        failures=list(failures),
    )
