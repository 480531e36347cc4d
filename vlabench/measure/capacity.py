"""The capacity search (``--robots auto``): how many robots one policy instance serves at the control rate while
every robot's p99 still passes the gate. Robots double from one while the gate holds (up to a most), then the count
is bisected between the last that passed and the first that failed: about 2·log2(most) serving windows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Served = TypeVar("Served")


@dataclass(frozen=True)
class Step(Generic[Served]):
    """One serving window of the search: its robot count, whether the gate held, and what was measured."""

    robots: int
    passed: bool
    served: Served


@dataclass(frozen=True)
class Search(Generic[Served]):
    capacity: int  # the largest count that passed (0: not even one robot)
    most: int  # the largest count the search could try
    steps: list[Step[Served]]
    stopped: bool = False  # a window ended early (Ctrl-C): the search stopped there

    @property
    def at_capacity(self) -> Step[Served]:
        """The step at the capacity (the one-robot step when none passed)."""
        wanted = max(self.capacity, 1)
        return next(step for step in reversed(self.steps) if step.robots == wanted)


class _Stop(Exception):
    pass


def search_capacity(
    serve_at: Callable[[int], tuple[bool, Served]], most: int, stop: Callable[[Served], bool] = lambda _: False
) -> Search[Served]:
    """Serve 1, 2, 4, … robots (``serve_at(n)``: passed, what was measured) until one fails or ``most`` passes,
    then bisect; each count is served once. A window for which ``stop`` is true, or Ctrl-C between windows, ends
    the search there."""
    if most < 1:
        raise ValueError(f"the capacity search needs at least one robot, not {most}")
    steps: list[Step[Served]] = []

    def run(robots: int) -> bool:
        try:
            passed, served = serve_at(robots)
        except KeyboardInterrupt:  # between windows: the counts served so far are kept
            if not steps:
                raise
            raise _Stop from None
        steps.append(Step(robots, passed, served))
        if stop(served):
            raise _Stop
        return passed

    passed_at, failed_at, robots = 0, None, 1
    try:
        while failed_at is None:
            if run(robots):
                passed_at = robots
                if robots == most:
                    break
                robots = min(most, robots * 2)
            else:
                failed_at = robots
        while failed_at is not None and failed_at - passed_at > 1:
            middle = (passed_at + failed_at) // 2
            if run(middle):
                passed_at = middle
            else:
                failed_at = middle
    except _Stop:
        return Search(passed_at, most, steps, stopped=True)
    return Search(passed_at, most, steps)
