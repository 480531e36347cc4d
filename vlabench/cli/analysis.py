"""``vlabench roofline``, ``project``, ``fidelity`` and ``calibrate dp-cache``: analytic bounds, projections, and what
the optimizations cost."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from vlabench.atomic import require_writable
from vlabench.cli.options import (
    Bounds,
    CamerasFlag,
    ChunkFlag,
    DeviceFlag,
    OneBackendFlag,
    StepsFlag,
    TargetOption,
    arguments_for,
    contextual,
    number_option,
    run_option,
)
from vlabench.cli.views.console import markup_safe, show, stderr
from vlabench.errors import InputError

# fidelity and calibrate dp-cache: the exact path is fp32 eager torch; these choose what computes the optimized actions
COUNT = Bounds(1, 100_000, integer=True)
OptimizedPrecisionFlag = Annotated[
    str, TargetOption(help="Precision of the backend computing the optimized actions (the exact path is fp32 torch).")
]
CheckpointFlag = Annotated[
    Path | None, TargetOption(help="lerobot model.safetensors (or its folder) to load instead of seeded weights.")
]


def closed_loop_precisions_option(value: str) -> str:
    """``--closed-loop-precisions`` checked when the command line is parsed: a bad name is a usage error (exit 2)
    listing the valid ones; the value comes back as the canonical comma list (or ``none``)."""
    from vlabench.optimizations.closed_loop.precision import NONE, parse_precisions

    try:
        return ",".join(parse_precisions(value)) or NONE
    except InputError as exc:
        raise typer.BadParameter(str(exc)) from None


def roofline(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", "-m", help="Model name.")] = "smolvla",
    device: Annotated[
        str, typer.Option("--device", "-d", help="Any device profile (present or not), or auto/cpu/cuda/jetson.")
    ] = "auto",
    precision: Annotated[
        str | None,
        typer.Option(
            help=contextual(
                "fp32, bf16, fp16; int8 or fp8 where the profile quotes their peak.",
                "fp32 on CPUs, else bf16 or fp16 from the profile",
            )
        ),
    ] = None,
    cameras: CamerasFlag = None,
    steps: StepsFlag = None,
    chunk: ChunkFlag = None,
    measure_ceilings: Annotated[
        bool | None,
        typer.Option(help=contextual("Measure GEMM peak and bandwidth here.", "when the device is this host")),
    ] = None,
    result: Annotated[
        Path | None, typer.Option(help="A `vlabench run` result: achieved FLOP/s from its measured phase latencies.")
    ] = None,
    efficiency: Annotated[
        float | None,
        number_option(
            Bounds(0.0, 1.0, open_below=True),
            help=contextual("Projection: share of the roofline the device reaches (0–1).", "1"),
        ),
    ] = None,
    calibrate: Annotated[
        Path | None, typer.Option(help="Projection: take per-phase efficiency from this measured result.")
    ] = None,
    control_hz: Annotated[
        float, run_option("control_hz", help="Control-rate target for the feasibility verdict, Hz.")
    ] = 10.0,
    stack: Annotated[
        str, typer.Option(help="Projection without --efficiency/--calibrate: the fitted software stack to project.")
    ] = "pytorch-eager",
    layers: Annotated[bool, typer.Option(help="Print the per-layer table (VLM and expert).")] = True,
    top: Annotated[int, number_option(Bounds(0, 10_000, integer=True), help="Heaviest operator kinds to list.")] = 12,
    html: Annotated[bool, typer.Option(help="Write the interactive roofline chart (HTML) into --out.")] = True,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder for the chart.")] = Path("results"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """FLOPs and bytes per phase, layer and operator against datasheet and measured ceilings; projection to any
    profiled device with a feasibility verdict."""
    from vlabench.analysis.roofline_chart import write_roofline_html
    from vlabench.cli.views.roofline import roofline_renderables
    from vlabench.commands.roofline import RooflineRequest, default_precision, resolve_profile, run_roofline
    from vlabench.vocab import Precision

    if html:
        require_writable(out_dir, "--out", "a chart")
    chosen = Precision.parse(precision) if precision else default_precision(resolve_profile(device)[0])
    fields = {field.name for field in dataclasses.fields(RooflineRequest)}
    outcome = run_roofline(RooflineRequest(**{**arguments_for(ctx, fields), "precision": chosen}))
    outcome.report.operators = outcome.report.operators[:top]
    report = outcome.report
    chart = out_dir / f"{report.model}_{report.device}_{report.precision}.roofline.html"
    written = [f"chart: [bold]{markup_safe(write_roofline_html(report, chart))}[/]"] if html else []
    show(as_json, outcome, roofline_renderables(outcome, layers), *written)


def project(
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Every (model, device, stack, precision) the profiles allow, narrowed by the flags."
        ),
    ] = False,
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Model name (repeatable).")] = None,
    device: Annotated[list[str] | None, typer.Option("--device", "-d", help="Device profile (repeatable).")] = None,
    stack: Annotated[
        list[str] | None,
        typer.Option(
            help="Software stack (repeatable): pytorch-eager, pytorch-compiled, tensorrt, onnxruntime, openvino."
        ),
    ] = None,
    precision: Annotated[
        list[str] | None,
        typer.Option(help="fp32, bf16, fp16, int8 or fp8 (repeatable; int8 and fp8 where the device has that peak)."),
    ] = None,
    control_hz: Annotated[float, run_option("control_hz", help="Control rate the cost model assumes, Hz.")] = 10.0,
    cameras: CamerasFlag = None,
    steps: StepsFlag = None,
    power_mode: Annotated[
        str | None,
        typer.Option(help="A power mode of the device's profile (e.g. a Jetson nvpmodel mode); default: its maximum."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    out_file: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the JSON to this file.")] = None,
) -> None:
    """Projected latency per phase, rate, estimated energy, cost and memory fit, each with the grouped-CV error band
    of its stack on its device class (stacks with fewer than three published entries marked uncalibrated); never
    ranked with measured results."""
    from vlabench.cli.views.project import project_renderables
    from vlabench.commands.project import ProjectRequest, run_project, write_outcome

    if out_file is not None:
        require_writable(out_file.parent, "--out", "a projection")
    request = ProjectRequest(
        model or [], device or [], stack or [], precision or [], every, control_hz, cameras, steps, power_mode
    )
    outcome = run_project(request)
    written = [f"projection: [bold]{markup_safe(write_outcome(outcome, out_file))}[/]"] if out_file else []
    show(as_json, outcome, project_renderables(outcome), *written)


def fidelity(
    model: Annotated[str, typer.Option("--model", "-m", help="Model replica for the open-loop errors.")] = "smolvla",
    device: DeviceFlag = "auto",
    backend: OneBackendFlag = "torch",
    precision: OptimizedPrecisionFlag = "fp32",
    checkpoint: CheckpointFlag = None,
    observations: Annotated[
        int, number_option(COUNT, help="Open loop: cycles of a drifting observation sequence.")
    ] = 100,
    closed_loop: Annotated[
        bool,
        typer.Option(
            help="Closed loop: task success. A model vlabench trained (smolvla-metaworld-tiny) plays its benchmark "
            "(Meta-World) under every variant; others are judged through vlabench's Reacher-v5 policy."
        ),
    ] = True,
    episodes: Annotated[int, number_option(COUNT, help="Closed loop: seeded episodes per variant (and task).")] = 50,
    closed_loop_precisions: Annotated[
        str,
        typer.Option(
            parser=closed_loop_precisions_option,
            metavar="LIST",
            help="Reacher closed loop: the exact loop again with the policy at these precisions, on the same "
            "episodes: a comma list of bf16, int8, fp8, int4 (int8/fp8/int4: the torch backend's CPU quantizers), "
            "or none.",
        ),
    ] = "bf16,int8,fp8,int4",
    variants: Annotated[
        str,
        typer.Option(
            metavar="LIST",
            help="Trained model's closed loop: default (bf16, int8 and int4 on every CPU backend that has them, and "
            "every optimization), all (also each backend at fp32), or a comma list of <backend>-<precision> "
            "(torch, torch-compile, onnxruntime, openvino × fp32, bf16, int8, int4), dp-cache, "
            "dp-cache-calibrated, v-aefusion, fuse-expert-kv, fewer-steps; the fp32 torch reference always runs.",
        ),
    ] = "default",
    tasks: Annotated[
        str | None,
        typer.Option(metavar="LIST", help=contextual("Trained model's closed loop: tasks to play.", "all it learned")),
    ] = None,
    max_steps: Annotated[
        int, number_option(COUNT, help="Trained model's closed loop: an episode not solved in this many steps fails.")
    ] = 200,
    threads: Annotated[
        int, run_option("threads", help="Trained model's closed loop: intra-op threads of every backend.")
    ] = 1,
    actions_per_chunk: Annotated[
        int | None,
        number_option(
            COUNT,
            help=contextual(
                "Closed loop: actions executed per predicted chunk; more is less forgiving.",
                "the trained model's own; 4 of 8 for Reacher",
            ),
        ),
    ] = None,
    seed: Annotated[int, run_option("seed", help="Seed for weights, observations, noise and episodes.")] = 0,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Results folder.")] = Path("results"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the fidelity JSON instead of tables.")] = False,
) -> None:
    """Action error (open loop) and task success (closed loop) of every optimization and precision."""
    from vlabench.cli.views.optimizations import closed_loop_schemes, fidelity_tables
    from vlabench.commands.fidelity import TaskSuccessOptions, run_fidelity

    require_writable(out_dir, "--out", "a fidelity report")
    stderr.print(
        f"open loop: {observations} observations of {model}"
        + (f"; closed loop: {episodes} episodes" if closed_loop else "")
    )
    target = {"device": device, "backend": backend, "precision": precision, "checkpoint": checkpoint}
    episodes = episodes if closed_loop else 0
    precisions = [] if closed_loop_precisions == "none" else closed_loop_precisions.split(",")
    task_list = tuple(name.strip() for name in tasks.split(",")) if tasks is not None else None
    options = TaskSuccessOptions(variants, task_list, max_steps, threads)
    report, path = run_fidelity(
        model,
        observations,
        episodes,
        seed,
        out_dir,
        actions_per_chunk,
        precisions,
        options,
        progress=lambda line: stderr.print(markup_safe(line)),
        **target,
    )
    skipped = [f"skipped {row.variant}: {row.reason}" for row in report.skipped]
    notes = [markup_safe(line) for line in [*closed_loop_schemes(report), *skipped]]
    show(as_json, report, [*fidelity_tables(report), *notes], f"fidelity: [bold]{markup_safe(path)}[/]")
    if report.task_success is not None and report.task_success.interrupted:
        stderr.print("[bold red]interrupted[/]: the episodes every variant completed were written, marked interrupted")
        raise typer.Exit(130)


def calibrate_dp_cache(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name.")] = "smolvla",
    device: DeviceFlag = "auto",
    backend: OneBackendFlag = "torch",
    precision: OptimizedPrecisionFlag = "fp32",
    checkpoint: CheckpointFlag = None,
    observations: Annotated[int, number_option(COUNT, help="Seeded observations to calibrate on.")] = 32,
    budget: Annotated[
        float,
        number_option(
            Bounds(0.0, 10.0, open_below=True),
            help="Worst relative action error allowed (max |Δ| / max |exact displacement|).",
        ),
    ] = 0.05,
    steps: StepsFlag = None,
    cameras: CamerasFlag = None,
    seed: Annotated[int, run_option("seed", help="Seed for weights, observations and noise.")] = 0,
    out_file: Annotated[
        Path | None, typer.Option("--out", "-o", help=contextual("Schedule file.", "results/<model>.dp-cache.json"))
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule JSON.")] = False,
) -> None:
    """Pick the DP-Cache schedule with the most skipped steps within an action-error budget; save it for --dp-cache."""
    from vlabench.cli.views.optimizations import schedule_lines
    from vlabench.commands.calibrate import calibration_path, plan_calibration, run_calibration

    out_file = calibration_path(out_file, model)
    target = {"device": device, "backend": backend, "precision": precision, "checkpoint": checkpoint}
    plan = plan_calibration(observations, budget, model, seed=seed, steps=steps, cameras=cameras, **target)
    where = f"{plan.backend.name} {plan.precision} on {plan.device.profile.name}"
    stderr.print(f"calibrating DP-Cache on {observations} observations of {model} ({where}) …")
    schedule, path = run_calibration(plan, observations, budget, out_file)
    lines = schedule_lines(schedule, budget)
    baseline = (schedule.calibration or {}).get("baseline_error", 0.0)
    if baseline > budget:
        lines.append(f"warning: {where} alone (every step computed) errs {baseline:.4f}, over the budget")
    show(
        as_json,
        schedule,
        lines,
        f"schedule file: [bold]{markup_safe(path)}[/] (use with --dp-cache {markup_safe(path)})",
    )
