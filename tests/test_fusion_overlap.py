"""V-AEFusion's purpose: the prefix of observation t really runs alongside the stale denoising steps.

Both halves are sleeping stand-ins (``time.sleep`` releases the GIL and is immune to CPU load), so the expected
timings are known: a threaded FusionLoop must overlap them and beat the sequential sum, an inline one must not.
"""

import statistics
import threading
import time

import pytest
import torch

from vlabench.measure.action_loops import EulerLoop
from vlabench.optimizations.fusion import FusionLoop

CPU = torch.device("cpu")
PREFIX_S = 0.060  # vision + VLM prefill stand-in
STEP_S = 0.010  # one action-expert denoising step
STEPS = 10
STALE_STEPS = 6  # 6 x 10 ms of stale steps against a 60 ms prefix: the two overlapped parts are equally long
CYCLES = 7  # the first (synchronous) cycle is the warm one; medians over the remaining 6

PREFIX_MS = PREFIX_S * 1e3
STALE_MS = STALE_STEPS * STEP_S * 1e3
SEQUENTIAL_MS = PREFIX_MS + STEPS * STEP_S * 1e3  # 160 ms
EXPECTED_OVERLAP_MS = min(PREFIX_MS, STALE_MS)  # 60 ms


class SleepingPrefix:
    """Returns a cache tagged with its observation after sleeping; records the thread it ran on."""

    def __init__(self):
        self.threads = []

    def __call__(self, observation):
        self.threads.append(threading.get_ident())
        time.sleep(PREFIX_S)
        return {"observation": observation}


class SleepingExpert:
    """Sleeps per denoising step; records which observation's cache each step used."""

    def __init__(self):
        self.used = []

    def denoise_step(self, x_t, t, cache):
        self.used.append(cache["observation"])
        time.sleep(STEP_S)
        return torch.ones_like(x_t)


def run_cycles(concurrent):
    prefix, expert = SleepingPrefix(), SleepingExpert()
    loop = FusionLoop(prefix, expert, EulerLoop(STEPS, 1, CPU), lambda: None, STALE_STEPS, CPU, concurrent=concurrent)
    try:
        spans = [loop.cycle(observation, torch.zeros(1, 4, 2))[1] for observation in range(CYCLES)]
    finally:
        loop.close()
    return prefix, expert, spans


def test_threaded_fusion_overlaps_the_prefix_with_the_stale_steps():
    prefix, expert, spans = run_cycles(concurrent=True)
    first, later = spans[0], spans[1:]
    assert first.stale is None and first.overlap_ms == 0
    assert first.latency_ms >= SEQUENTIAL_MS * 0.99  # the warm cycle is synchronous
    overlaps = [s.overlap_ms for s in later]
    cycles = [s.latency_ms for s in later]
    assert statistics.median(overlaps) >= 0.5 * EXPECTED_OVERLAP_MS, (overlaps, cycles)
    assert min(overlaps) > 0, overlaps
    assert statistics.median(cycles) <= SEQUENTIAL_MS - 0.5 * EXPECTED_OVERLAP_MS, (overlaps, cycles)

    # each fused cycle: stale steps on observation t-1's cache, then fresh steps on observation t's
    for t in range(1, CYCLES):
        assert expert.used[t * STEPS : (t + 1) * STEPS] == [t - 1] * STALE_STEPS + [t] * (STEPS - STALE_STEPS)
    # the prefix ran on the worker thread, not the caller's
    assert prefix.threads[0] == threading.get_ident() and threading.get_ident() not in prefix.threads[1:]


def test_inline_fusion_has_no_overlap_and_costs_the_sequential_sum():
    _, expert, spans = run_cycles(concurrent=False)
    cycles = [s.latency_ms for s in spans[1:]]
    assert all(s.stale is not None and s.overlap_ms == 0 for s in spans[1:])
    assert len(expert.used) == CYCLES * STEPS
    # sleeps never return early, so the inline cycle is at least the sum; generous upper bound for a loaded machine
    assert statistics.median(cycles) >= SEQUENTIAL_MS * 0.99, cycles
    assert statistics.median(cycles) == pytest.approx(SEQUENTIAL_MS, rel=0.5), cycles
