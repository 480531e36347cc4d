"""``vlabench models``, ``devices`` and ``rank``: what can be measured, and the measured results ranked."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vlabench.cli.options import contextual, run_option
from vlabench.cli.views.console import stderr, stdout, warn_skipped, write_json
from vlabench.errors import InputError
from vlabench.models.specs import families

if TYPE_CHECKING:
    from vlabench.analysis.cet import ExecutionModel
    from vlabench.hardware.devices import ResolvedDevice
    from vlabench.kernels.ceilings import MeasuredCeiling


def models(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False) -> None:
    """List the model replicas: parameters, prefix tokens, denoising steps, chunk."""
    from vlabench.cli.views.catalog import models_table
    from vlabench.commands.catalog import model_rows

    rows = model_rows()
    if as_json:
        write_json(json.dumps(rows, indent=2))
    else:
        stdout.print(models_table(rows))


models.__doc__ = f"{models.__doc__} Families: {', '.join(families())}."  # the registered ones


def devices(
    measure: Annotated[
        bool, typer.Option("--measure", help="Measure GEMM peak and memory bandwidth on this host's device.")
    ] = False,
    precision: Annotated[
        list[str] | None, typer.Option(help=contextual("GEMM precision(s) to measure.", "fp32 on CPU, bf16 on CUDA"))
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the device profiles and mark the hardware detected on this host."""
    from vlabench.cli.views.catalog import ceilings_table, devices_table
    from vlabench.commands.catalog import device_rows

    rows, host_line = device_rows()
    ceilings = measured_ceilings(precision) if measure else None
    if as_json:
        payload: dict[str, Any] = {"host": host_line, "profiles": rows}
        if ceilings is not None:
            resolved, measured = ceilings
            payload["measured"] = {
                "device": resolved.profile.name,
                "torch_device": str(resolved.torch_device),
                "ceilings": [c.model_dump() for c in measured],
            }
        write_json(json.dumps(payload, indent=2))
        return
    stdout.print(devices_table(rows))
    stdout.print(host_line)
    if ceilings is not None:
        stdout.print(ceilings_table(*ceilings))


def measured_ceilings(precisions: list[str] | None) -> tuple[ResolvedDevice, list[MeasuredCeiling]]:
    """Ceilings of the device ``--device auto`` picks, measured now (a few seconds per quantity)."""
    from vlabench.hardware.devices import resolve_device
    from vlabench.kernels.ceilings import measure_ceilings
    from vlabench.vocab import Precision

    resolved = resolve_device("auto")
    default = [Precision.default(resolved.torch_device.type != "cuda", Precision.REDUCED)]
    chosen = tuple(Precision.parse(p) for p in (precisions or default))
    stderr.print(f"measuring ceilings of {resolved.profile.name} on {resolved.torch_device} …")
    return resolved, measure_ceilings(resolved.torch_device, chosen)


def rank(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Result files or folders (searched recursively); none: the bundled leaderboard (the results this "
            "checkout ships, the published and the projected rows, as `vlabench site build` builds it)."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="The question's model (none: every model's question).")
    ] = None,
    cameras: Annotated[int | None, typer.Option(min=1, help="The question's cameras (default: the model's).")] = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="The question's denoising steps (default: the model's).")
    ] = None,
    prompt_tokens: Annotated[
        int | None, typer.Option(min=0, help="The question's prompt tokens (default: the model's).")
    ] = None,
    all_workloads: Annotated[
        bool, typer.Option("--all-workloads", help="Rank every workload of each model, each as its own question.")
    ] = False,
    priority: Annotated[str, typer.Option(help="cost, energy or time.")] = "cost",
    control_hz: Annotated[
        float, run_option("control_hz", help="Control-rate target for the feasibility gate, Hz.")
    ] = 10.0,
    execution: Annotated[
        str | None,
        typer.Option(
            metavar="[per-step|sync|async]",
            help=contextual(
                "Judge on-robot rows under this execution model (served and offload rows: their robots').", "per-step"
            ),
        ),
    ] = None,
    actions_per_chunk: Annotated[
        int | None,
        run_option("actions_per_chunk", help="Actions executed per chunk with --execution sync or async."),
    ] = None,
    device_class: Annotated[
        list[str] | None, typer.Option(help="Keep only devices of this class (jetson, datacenter-gpu, cpu...).")
    ] = None,
    deployment: Annotated[
        list[str] | None, typer.Option(help="Keep only this deployment: on-robot, served or offload.")
    ] = None,
    provenance: Annotated[
        list[str] | None, typer.Option(help="Keep only these rows: measured, projected or reported.")
    ] = None,
    published: Annotated[
        bool | None,
        typer.Option("--published/--no-published", help="Add the published rows (default: for the bundled board)."),
    ] = None,
    projected: Annotated[
        bool | None,
        typer.Option(
            "--projected/--no-projected", help="Add the projection model's rows (default: for the bundled board)."
        ),
    ] = None,
    approximate_together: Annotated[
        bool,
        typer.Option("--approximate-together", help="Rank approximate rows (lossy optimizations) with the exact ones."),
    ] = False,
    include_partial: Annotated[
        bool, typer.Option("--include-partial", help="Rank partial results too (interrupted after timing began).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows instead of tables.")] = False,
) -> None:
    """Rank devices by CET, one question at a time (a model at one workload, a control rate, an execution model):
    gate on memory, correctness and control rate (p99), order by the priority, flag ties and the Pareto set. Never
    ranks across models or workloads; the site ranks the same way."""
    import pandas as pd

    from vlabench.cli.views.rank import rank_table
    from vlabench.leaderboard_site.ranking import Question, rank_board

    if control_hz <= 0:
        raise InputError("--control-hz must be positive")
    question = Question(
        model=model,
        workload=(cameras, steps, prompt_tokens),
        all_workloads=all_workloads,
        priority=priority,
        control_hz=control_hz,
        execution=chosen_execution(execution, actions_per_chunk),
        device_classes=device_class,
        deployments=deployment,
        provenance=provenance,
        approximate_together=approximate_together,
    )
    bundled = not paths
    ranked = rank_board(
        paths or [],
        question,
        published=bundled if published is None else published,
        projected=bundled if projected is None else projected,
        include_partial=include_partial,
    )
    warn_skipped(ranked.skipped)
    if as_json:
        rows = [row for rows in ranked.questions.values() for row in rows]
        write_json(json.dumps(finite(rows), indent=2, allow_nan=False, default=str))
        return
    for label, rows in ranked.questions.items():
        stdout.print(rank_table(pd.DataFrame(rows), priority, control_hz, label))


def finite(value: Any) -> Any:
    """A JSON-like value with every non-finite float (NaN, ±inf) as None: JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite(item) for item in value]
    return value


def chosen_execution(mode: str | None, actions_per_chunk: int | None) -> ExecutionModel:
    """``--execution`` and ``--actions-per-chunk`` as an execution model (per step when neither is given); a chunk
    size needs a chunked execution, and a chunked execution needs a chunk size here (runs differ in theirs)."""
    from vlabench.analysis.cet import EXECUTIONS, ExecutionModel

    if mode is None and actions_per_chunk is None:
        return ExecutionModel()
    if mode not in EXECUTIONS:
        raise InputError(f"--execution must be one of {', '.join(EXECUTIONS)}, not {mode!r}")
    if mode == "per-step":
        if actions_per_chunk is not None:
            raise InputError("--actions-per-chunk needs chunked execution: choose --execution sync or async")
        return ExecutionModel()
    if actions_per_chunk is None:
        raise InputError(f"--execution {mode} needs --actions-per-chunk (runs may differ in their chunk)")
    return ExecutionModel(mode=mode, actions_per_chunk=actions_per_chunk)
