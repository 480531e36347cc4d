"""Executing run plans so that a native crash in one backend (a segfault, an abort) never takes a multi-backend run
down silently: the backends run, interleaved as before, in one spawned child; if it dies, each backend runs again
in a child of its own, so the crash is named (backend and signal) and the other backends' results are kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from vlabench.commands.run.launchers import Announce, InProcess, Launcher, SpawnedChild
from vlabench.commands.run.plan import RunPlan
from vlabench.measure.timing import Progress
from vlabench.results.launch_outcome import LaunchOutcome
from vlabench.results.schema import RunResult


@dataclass(frozen=True)
class BackendCrash:
    """A backend whose process died (a signal, or an exception that is not a vlabench error)."""

    backend: str
    message: str


@dataclass
class Outcome:
    """The results of the backends that completed, and the backends that crashed."""

    results: list[RunResult]
    crashes: list[BackendCrash] = field(default_factory=list)


def execute_runs(
    plans: list[RunPlan], progress: Progress | None = None, announce: Announce | None = None, isolate: bool = False
) -> Outcome:
    """One plan: executed in this process (unless ``isolate``). Several: in one spawned child, interleaved; when
    that child dies, each plan again in a child of its own. A vlabench error the runs raise is raised here as the
    same error class."""
    if len(plans) == 1 and not isolate:
        return Outcome(launched(InProcess(progress, announce), plans).results())
    shared = launched(SpawnedChild(progress, announce), plans)
    if shared.status != "failed":
        return Outcome(shared.results())
    if len(plans) == 1:
        return Outcome([], [BackendCrash(plans[0].backend.name, f"{label(plans[0])} {shared.reason}")])
    outcome = Outcome([])
    note = (
        f"ran in a process of its own after the process shared by {len(plans)} backends {shared.reason}: its "
        "timings are not interleaved with theirs"
    )
    for plan in plans:
        alone = launched(SpawnedChild(progress, announce, (note,)), [plan])
        if alone.status == "failed":
            outcome.crashes.append(BackendCrash(plan.backend.name, f"{label(plan)} {alone.reason}"))
            continue
        outcome.results.extend(alone.results())
    return outcome


def launched(launcher: Launcher, plans: list[RunPlan]) -> LaunchOutcome:
    """``launcher.launch(plans)``, raising the vlabench error the runs raised."""
    outcome = launcher.launch(plans)
    outcome.raise_error()
    return outcome


def label(plan: RunPlan) -> str:
    """``backend 'openvino' (bf16)``: a crash names the backend and the precision it ran at."""
    return f"backend '{plan.backend.name}' ({plan.config.precision or plan.precision})"
