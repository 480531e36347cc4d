"""Where runs execute, behind one interface: ``Launcher.launch(runs) -> LaunchOutcome``.

- ``InProcess``: this process (the default for one backend).
- ``SpawnedChild``: one spawned child process for all the runs, its progress relayed here (a native crash in a
  backend cannot take this process down).
- ``Subprocess`` (``subprocess_launcher.py``): ``python3 -m vlabench run --config`` in a process group of its own,
  with a timeout (a sweep's local runs).
- ``RayTask`` (``fleet/ray_dispatch.py``): a ``Subprocess`` on a Ray node holding the run's device.

A run is anything with a ``config`` (a ``RunPlan`` from this process, or a sweep's ``SweepRun``); launchers that
execute elsewhere re-plan there from it."""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Protocol

import vlabench.commands.run.execution as execution
from vlabench.backends import BACKENDS, Backend
from vlabench.commands.run.plan import RunPlan, plan_run
from vlabench.commands.run.precision_auto import choose_precision, describe
from vlabench.config import RunConfig
from vlabench.errors import VlabenchError
from vlabench.measure.policy import PreparedPolicy
from vlabench.measure.timing import Progress
from vlabench.results.launch_outcome import LaunchOutcome
from vlabench.results.schema import RunResult
from vlabench.vocab import Precision

Announce = Callable[[str], None]
Worker = Callable[[list[RunPlan], Progress | None, Announce | None, tuple[str, ...]], list[RunResult]]
POLL_S = 0.2


class Launchable(Protocol):
    config: RunConfig


@dataclass(frozen=True)
class ConfiguredRun:
    """A run known only by its config (planned where it executes)."""

    config: RunConfig


class Launcher(Protocol):
    """Executes runs somewhere and says what they produced; never raises for a run that failed or died (a vlabench
    error the runs raised is in the outcome: ``outcome.raise_error()``)."""

    def launch(self, runs: Sequence[Launchable]) -> LaunchOutcome: ...


def finished(started: float, started_utc: datetime, **fields: object) -> LaunchOutcome:
    """An outcome stamped with this host, the launch's start and its wall time."""
    wall_s = time.monotonic() - started
    return LaunchOutcome(wall_s=wall_s, hostname=socket.gethostname(), started_utc=started_utc, **fields)


def outcome_of(results: list[RunResult], started: float, started_utc: datetime) -> LaunchOutcome:
    status = "ok" if all(result.valid for result in results) else "invalid"
    texts = [result.model_dump_json() for result in results]
    return finished(started, started_utc, status=status, result_texts=texts)


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
    return execution.execute_many(resolved, progress, prepared, notes, details, announce)


@dataclass(frozen=True)
class OnThisHost:
    """A launcher on this host: where its runs' progress and announcements go, notes for every result's warnings, and
    the worker that executes the planned runs (``execute_here``; a spawned child's must be a module-level function)."""

    progress: Progress | None = None
    announce: Announce | None = None
    notes: tuple[str, ...] = ()
    worker: Worker = execute_here


class InProcess(OnThisHost):
    """Runs in this process: ``execute_here``. The planned runs are used as they are; others are planned here."""

    def launch(self, runs: Sequence[Launchable]) -> LaunchOutcome:
        started, started_utc = time.monotonic(), datetime.now(timezone.utc)
        try:
            plans = [run if isinstance(run, RunPlan) else plan_run(run.config) for run in runs]
            results = self.worker(plans, self.progress, self.announce, self.notes)
        except VlabenchError as exc:
            outcome = finished(started, started_utc, status="failed", reason=str(exc), error=type(exc).__name__)
            outcome.keep_raised(exc)
            return outcome
        outcome = outcome_of(results, started, started_utc)
        outcome.keep_results(results)
        return outcome


class SpawnedChild(OnThisHost):
    """Runs in one spawned child process (re-planned there from their configs, with the backend classes this process
    registered); its progress and announcements are relayed here while it runs."""

    def launch(self, runs: Sequence[Launchable]) -> LaunchOutcome:
        started, started_utc = time.monotonic(), datetime.now(timezone.utc)
        context = multiprocessing.get_context("spawn")
        configs = [run.config for run in runs]
        classes = {config.backend: BACKENDS[config.backend] for config in configs}
        with tempfile.TemporaryDirectory(prefix="vlabench-child-") as folder:
            reader, writer = context.Pipe(duplex=False)
            child = context.Process(
                target=child_main, args=(configs, classes, folder, writer, self.notes, self.worker), daemon=True
            )
            child.start()
            writer.close()
            try:
                relay(reader, child, self.progress, self.announce)
                child.join()
            finally:
                if child.is_alive():
                    child.terminate()
                    child.join()
                reader.close()
            return child_outcome(Path(folder), child.exitcode, len(configs), started, started_utc)


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


def child_outcome(
    folder: Path, exitcode: int | None, count: int, started: float, started_utc: datetime
) -> LaunchOutcome:
    """The child's results from ``folder``, the vlabench error it recorded, or how it died."""
    problem = folder / "error.json"
    if problem.exists():
        recorded = json.loads(problem.read_text())
        return finished(
            started, started_utc, status="failed", reason=recorded["message"], error=recorded["class"], exit_code=1
        )
    files = [folder / f"{index}.json" for index in range(count)]
    if exitcode == 0 and all(path.exists() for path in files):
        return outcome_of([RunResult.model_validate_json(path.read_text()) for path in files], started, started_utc)
    return finished(started, started_utc, status="failed", reason=death_description(exitcode), exit_code=exitcode)


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
    worker: Worker = execute_here,
) -> None:
    """In the child: plan, execute (``worker``), write each result as ``<index>.json`` (or a vlabench error as
    ``error.json``)."""
    faulthandler.enable()
    BACKENDS.update(classes)
    out = Path(folder)
    try:
        plans = [plan_run(config) for config in configs]
        results = worker(
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
