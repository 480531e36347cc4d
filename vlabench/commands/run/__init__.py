"""``vlabench run`` without the UI, one package with one entry: plan (``plan.py``: every name resolved and every
check made before anything large is allocated), prepare (``prepare.py``: ``prepare_contender``, what every command
that times a model times), launch (``launchers.py``, ``subprocess_launcher.py``, ``isolation.py``: where runs
execute) and execute (``execution.py``; ``timed_pass.py`` the timed pass, ``reference.py`` the correctness
reference, ``precision_auto.py`` ``--precision auto``, ``serving.py`` ``--robots``), then save (``output.py``).
Other packages import from here; the modules inside import one another by their own names."""

from vlabench.commands.run.checks import check_optimizations, check_robots_fit
from vlabench.commands.run.execution import execute, execute_many
from vlabench.commands.run.isolation import execute_runs
from vlabench.commands.run.launchers import ConfiguredRun, InProcess, Launcher, SpawnedChild
from vlabench.commands.run.output import Saved, check_paths, save_result
from vlabench.commands.run.plan import RunPlan, backend_options, check_fit_together, plan_run, plan_runs
from vlabench.commands.run.prepare import INPUT_VARIANTS, prepare_contender
from vlabench.commands.run.serving import (
    BatchedInference,
    InProcessServing,
    RobotObservations,
    announce_window,
    batched_inference,
    interrupted,
    robots_settings,
    search,
)
from vlabench.commands.run.subprocess_launcher import Subprocess

__all__ = [
    "INPUT_VARIANTS",
    "BatchedInference",
    "ConfiguredRun",
    "InProcess",
    "InProcessServing",
    "Launcher",
    "RobotObservations",
    "RunPlan",
    "Saved",
    "SpawnedChild",
    "Subprocess",
    "announce_window",
    "backend_options",
    "batched_inference",
    "check_fit_together",
    "check_optimizations",
    "check_paths",
    "check_robots_fit",
    "execute",
    "execute_many",
    "execute_runs",
    "interrupted",
    "plan_run",
    "plan_runs",
    "prepare_contender",
    "robots_settings",
    "save_result",
    "search",
]
