"""``vlabench models``, ``devices`` and ``rank``: what can be measured, and the measured results ranked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vlabench.cli.options import contextual, run_option
from vlabench.cli.views.console import stderr, stdout, warn_skipped, write_json
from vlabench.errors import InputError

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
    paths: Annotated[list[Path], typer.Argument(help="Result files or folders (searched recursively).")],
    priority: Annotated[str, typer.Option(help="cost, energy or time.")] = "cost",
    control_hz: Annotated[
        float, run_option("control_hz", help="Control-rate target for the feasibility gate, Hz.")
    ] = 10.0,
    execution: Annotated[
        str | None,
        typer.Option(
            metavar="[per-step|sync|async]",
            help=contextual("Judge every run under this execution model.", "each run's own"),
        ),
    ] = None,
    actions_per_chunk: Annotated[
        int | None,
        run_option("actions_per_chunk", help="Actions executed per chunk with --execution sync or async."),
    ] = None,
    approximate_together: Annotated[
        bool,
        typer.Option("--approximate-together", help="Rank approximate rows (lossy optimizations) with the exact ones."),
    ] = False,
    include_partial: Annotated[
        bool, typer.Option("--include-partial", help="Rank partial results too (interrupted after timing began).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows instead of a table.")] = False,
) -> None:
    """Rank results by CET: gate on memory and control rate (p99), order by the priority, flag the Pareto set."""
    from vlabench.analysis.cet import rank as rank_frame
    from vlabench.cli.views.rank import rank_table
    from vlabench.results.aggregate import load_results, results_frame

    if control_hz <= 0:
        raise InputError("--control-hz must be positive")
    model = chosen_execution(execution, actions_per_chunk)
    loaded, skipped = load_results(paths, include_partial)
    warn_skipped(skipped)
    if not loaded:
        raise InputError(f"no readable results under {', '.join(map(str, paths))}")
    frame = results_frame(loaded, control_hz, model)
    ranked = rank_frame(frame, priority, control_hz, model, approximate_separately=not approximate_together)
    if as_json:
        write_json(ranked.to_json(orient="records", indent=2))
    else:
        stdout.print(rank_table(ranked, priority, control_hz))


def chosen_execution(mode: str | None, actions_per_chunk: int | None) -> ExecutionModel | None:
    """``--execution`` and ``--actions-per-chunk`` as an execution model (None: each run's own); a chunk size needs a
    chunked execution, and a chunked execution needs a chunk size here (runs differ in theirs)."""
    from vlabench.analysis.cet import EXECUTIONS, ExecutionModel

    if mode is None and actions_per_chunk is None:
        return None
    if mode not in EXECUTIONS:
        raise InputError(f"--execution must be one of {', '.join(EXECUTIONS)}, not {mode!r}")
    if mode == "per-step":
        if actions_per_chunk is not None:
            raise InputError("--actions-per-chunk needs chunked execution: choose --execution sync or async")
        return ExecutionModel()
    if actions_per_chunk is None:
        raise InputError(f"--execution {mode} needs --actions-per-chunk (runs may differ in their chunk)")
    return ExecutionModel(mode=mode, actions_per_chunk=actions_per_chunk)
