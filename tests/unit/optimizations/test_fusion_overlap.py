"""V-AEFusion's purpose: the prefix of observation t really runs alongside the stale denoising steps.

Both halves are stand-ins that meet through events, never through the clock: in a threaded FusionLoop the first
stale step waits for the prefix to start and the prefix waits for a stale step to run while it runs (neither can
finish otherwise), so the overlap is shown by what ran when; an inline one runs the prefix before any stale step.
"""

import threading

import torch

from vlabench.measure.action_loops import EulerLoop
from vlabench.optimizations.fusion import FusionLoop

CPU = torch.device("cpu")
STEPS = 10
STALE_STEPS = 6
CYCLES = 4  # the first (synchronous) cycle is the warm one


class MeetingPrefix:
    """Returns a cache tagged with its observation; records the thread it ran on. When ``meet`` is set, a prefix
    after the first one waits (at most a minute, then fails the test) until a denoising step ran while it was running.
    """

    def __init__(self, meet: bool):
        self.meet, self.threads = meet, []
        self.running = threading.Event()
        self.stepped = threading.Event()

    def __call__(self, observation):
        self.threads.append(threading.get_ident())
        self.stepped.clear()
        self.running.set()
        try:
            if self.meet and observation > 0:
                assert self.stepped.wait(60.0), "no denoising step ran while the prefix was running"
        finally:
            self.running.clear()
        return {"observation": observation}


class WatchingExpert:
    """Records which observation's cache each step used and whether a prefix was running meanwhile."""

    def __init__(self, prefix: MeetingPrefix):
        self.prefix, self.used, self.alongside = prefix, [], []

    def denoise_step(self, x_t, t, cache):
        first_stale = len(self.used) >= STEPS and len(self.used) % STEPS == 0
        if self.prefix.meet and first_stale:  # the worker may not have started yet: the stale steps wait for it
            assert self.prefix.running.wait(60.0), "the prefix never started alongside the stale steps"
        self.used.append(cache["observation"])
        self.alongside.append(self.prefix.running.is_set())
        if self.prefix.running.is_set():
            self.prefix.stepped.set()
        return torch.ones_like(x_t)


def run_cycles(concurrent):
    prefix = MeetingPrefix(meet=concurrent)
    expert = WatchingExpert(prefix)
    loop = FusionLoop(prefix, expert, EulerLoop(STEPS, 1, CPU), lambda: None, STALE_STEPS, CPU, concurrent=concurrent)
    try:
        spans = [loop.cycle(observation, torch.zeros(1, 4, 2))[1] for observation in range(CYCLES)]
    finally:
        loop.close()
    return prefix, expert, spans


def test_threaded_fusion_overlaps_the_prefix_with_the_stale_steps():
    prefix, expert, spans = run_cycles(concurrent=True)
    first, later = spans[0], spans[1:]
    assert first.stale is None and first.overlap_ms == 0  # the warm cycle is synchronous
    assert all(s.overlap_ms > 0 for s in later), [s.overlap_ms for s in later]
    for t in range(1, CYCLES):
        cycle = slice(t * STEPS, (t + 1) * STEPS)
        # stale steps on observation t-1's cache, then fresh steps on observation t's
        assert expert.used[cycle] == [t - 1] * STALE_STEPS + [t] * (STEPS - STALE_STEPS)
        # a stale step ran while the prefix of observation t ran, and no fresh step did
        assert any(expert.alongside[cycle][:STALE_STEPS]) and not any(expert.alongside[cycle][STALE_STEPS:])
    # the prefix ran on the worker thread, not the caller's
    assert prefix.threads[0] == threading.get_ident() and threading.get_ident() not in prefix.threads[1:]


def test_inline_fusion_runs_the_prefix_before_any_stale_step():
    prefix, expert, spans = run_cycles(concurrent=False)
    assert all(s.stale is not None and s.overlap_ms == 0 for s in spans[1:])
    assert len(expert.used) == CYCLES * STEPS and not any(expert.alongside)
    assert set(prefix.threads) == {threading.get_ident()}
