"""Latency statistics over timed samples."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

NOISY_COV = 0.05


class Stats(BaseModel):
    """Summary of one phase's samples, in milliseconds."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float
    stdev: float
    cov: float


def summarize(samples_ms: list[float]) -> Stats:
    values = np.asarray(samples_ms, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no samples to summarize")
    mean = float(values.mean())
    stdev = float(values.std(ddof=1)) if values.size > 1 else 0.0
    p50, p90, p99 = (float(v) for v in np.percentile(values, [50, 90, 99]))
    return Stats(
        count=int(values.size),
        mean=mean,
        p50=p50,
        p90=p90,
        p99=p99,
        min=float(values.min()),
        max=float(values.max()),
        stdev=stdev,
        cov=stdev / mean if mean > 0 else 0.0,
    )
