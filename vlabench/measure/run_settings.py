"""When a run's timed pass stops, from its config: the one rule the runner, the result's warnings and the plan shown
before the run all read."""

from __future__ import annotations

import math

from vlabench.config import LIMITS, RunConfig
from vlabench.measure.stats import P99_BOUND_SAMPLES
from vlabench.measure.timing import RunnerSettings


def runner_settings(config: RunConfig) -> RunnerSettings:
    """When timing stops: at ``--duration`` for a sustained run; else after the minimum count (by default the one a
    bound on p99 needs) and duration, or at a cap."""
    if config.duration_s is not None:
        return RunnerSettings(config.warmup, 1, config.duration_s, iteration_cap(config), config.duration_s)
    wanted = config.min_iterations or min(P99_BOUND_SAMPLES, config.max_iterations)
    cap_s = max(config.max_duration_s, config.min_duration_s)
    return RunnerSettings(config.warmup, wanted, config.min_duration_s, config.max_iterations, cap_s)


SUSTAINED_PER_SECOND = 1000
"""A sustained run records at most this many inferences per second of its duration (1 ms each, faster than any VLA
here) so its samples' memory is bounded by its duration."""


def iteration_cap(config: RunConfig) -> int:
    """The most inferences a run may time (what its recorded samples are sized for)."""
    if config.duration_s is None:
        return config.max_iterations
    return min(int(LIMITS["max_iterations"][1]), math.ceil(config.duration_s * SUSTAINED_PER_SECOND))
