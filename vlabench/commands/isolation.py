"""Executing run plans so that a native crash in one backend (a segfault, an abort) never takes a multi-backend run
down silently: the backends run, interleaved as before, in one child process; if it dies, each backend runs again
in a child of its own, so the crash is named (backend and signal) and the other backends' results are kept."""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from vlabench import errors
from vlabench.backends import BACKENDS, Backend
from vlabench.commands import run as run_module
from vlabench.commands.precision_auto import choose_precision, describe
from vlabench.commands.run import RunPlan, plan_run
from vlabench.config import RunConfig
from vlabench.errors import VlabenchError
from vlabench.measure.policy import PreparedPolicy
from vlabench.measure.timing import Progress
from vlabench.results.schema import RunResult
from vlabench.vocab import Precision

Announce = Callable[[str], None]
POLL_S = 0.2


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


@dataclass
class ChildEnd:
    """How a child ended: its results (None when it died) and, when it died, how."""

    results: list[RunResult] | None
    death: str = ""


def execute_runs(
    plans: list[RunPlan], progress: Progress | None = None, announce: Announce | None = None, isolate: bool = False
) -> Outcome:
    """One plan: executed in this process (unless ``isolate``). Several: in one child process, interleaved; when
    that child dies, each plan again in a child of its own. A vlabench error in a child is raised here as the same
    error class."""
    if len(plans) == 1 and not isolate:
        return Outcome(execute_here(plans, progress, announce))
    shared = run_child(plans, progress, announce)
    if shared.results is not None:
        return Outcome(shared.results)
    if len(plans) == 1:
        return Outcome([], [BackendCrash(plans[0].backend.name, f"{label(plans[0])} {shared.death}")])
    outcome = Outcome([])
    note = (
        f"ran in a process of its own after the process shared by {len(plans)} backends {shared.death}: its timings "
        "are not interleaved with theirs"
    )
    for plan in plans:
        alone = run_child([plan], progress, announce, (note,))
        if alone.results is None:
            outcome.crashes.append(BackendCrash(plan.backend.name, f"{label(plan)} {alone.death}"))
            continue
        outcome.results.extend(alone.results)
    return outcome


def label(plan: RunPlan) -> str:
    """``backend 'openvino' (bf16)``: a crash names the backend and the precision it ran at."""
    return f"backend '{plan.backend.name}' ({plan.config.precision or plan.precision})"


def execute_here(
    plans: list[RunPlan],
    progress: Progress | None = None,
    announce: Announce | None = None,
    notes: tuple[str, ...] = (),
) -> list[RunResult]:
    """``execute_many`` in this process, after resolving ``--precision auto`` plans by a probe (announced, and
    recorded in each result's ``backend_details.precision_choice``); ``notes`` go into every result's warnings."""
    resolved: list[RunPlan] = []
    prepared: dict[int, PreparedPolicy] = {}
    choices = {}
    for index, plan in enumerate(plans):
        if plan.config.precision == Precision.AUTO:
            plan, choice, policy = choose_precision(plan)
            choices[index] = choice
            if policy is not None:
                prepared[index] = policy
            if announce:
                announce(describe(plan.backend.name, choice))
        resolved.append(plan)
    details = {index: {"precision_choice": choice.model_dump(mode="json")} for index, choice in choices.items()}
    return run_module.execute_many(resolved, progress, prepared, notes, details)


def run_child(
    plans: list[RunPlan], progress: Progress | None, announce: Announce | None, notes: tuple[str, ...] = ()
) -> ChildEnd:
    """Execute ``plans`` in a spawned child (re-planned there from their configs, with the backend classes this
    process registered; ``notes`` for every result's warnings); its progress and announcements are relayed here
    while it runs."""
    context = multiprocessing.get_context("spawn")
    configs = [plan.config for plan in plans]
    classes = {config.backend: BACKENDS[config.backend] for config in configs}
    with tempfile.TemporaryDirectory(prefix="vlabench-child-") as folder:
        reader, writer = context.Pipe(duplex=False)
        child = context.Process(target=child_main, args=(configs, classes, folder, writer, notes), daemon=True)
        child.start()
        writer.close()
        try:
            relay(reader, child, progress, announce)
            child.join()
        finally:
            if child.is_alive():
                child.terminate()
                child.join()
            reader.close()
        return child_end(Path(folder), child.exitcode, len(plans))


def relay(
    reader: Connection, child: multiprocessing.process.BaseProcess, progress: Progress | None, announce: Announce | None
) -> None:
    """Pass the child's messages on until it closes its end of the pipe (it ended or died)."""
    while True:
        if not reader.poll(POLL_S):
            if child.is_alive():
                continue
            if not reader.poll(0):
                return
        try:
            kind, *payload = reader.recv()
        except (EOFError, OSError):
            return
        if kind == "progress" and progress:
            progress(*payload)
        elif kind == "note" and announce:
            announce(*payload)


def child_end(folder: Path, exitcode: int | None, count: int) -> ChildEnd:
    """The child's results from ``folder``; a vlabench error it recorded is raised; a death is described."""
    problem = folder / "error.json"
    if problem.exists():
        recorded = json.loads(problem.read_text())
        error_class = getattr(errors, recorded["class"], VlabenchError)
        if not (isinstance(error_class, type) and issubclass(error_class, VlabenchError)):
            error_class = VlabenchError
        raise error_class(recorded["message"])
    files = [folder / f"{index}.json" for index in range(count)]
    if exitcode == 0 and all(path.exists() for path in files):
        return ChildEnd([RunResult.model_validate_json(path.read_text()) for path in files])
    return ChildEnd(None, death_description(exitcode))


def death_description(exitcode: int | None) -> str:
    """``died from SIGSEGV (signal 11)``, or how else a child ended without results."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "an unknown signal"
        return f"died from {name} (signal {-exitcode}); its native stack, if any, is printed above"
    if exitcode:
        return f"failed with exit status {exitcode} (an unexpected error; its traceback is printed above)"
    return "ended without writing its results"


def child_main(
    configs: list[RunConfig],
    classes: dict[str, type[Backend]],
    folder: str,
    writer: Connection,
    notes: tuple[str, ...] = (),
) -> None:
    """In the child: plan, execute, write each result as ``<index>.json`` (or a vlabench error as ``error.json``)."""
    faulthandler.enable()
    BACKENDS.update(classes)
    out = Path(folder)
    try:
        plans = [plan_run(config) for config in configs]
        results = execute_here(
            plans,
            lambda done, expected: writer.send(("progress", done, expected)),
            lambda text: writer.send(("note", text)),
            notes,
        )
    except VlabenchError as exc:
        (out / "error.json").write_text(json.dumps({"class": type(exc).__name__, "message": str(exc)}))
        return
    for index, result in enumerate(results):
        (out / f"{index}.json").write_text(result.model_dump_json())
    writer.close()
