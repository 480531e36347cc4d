"""``vlabench run``, ``profile`` and ``loop``: the commands that measure a model on this host from a RunConfig."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from vlabench.cli.options import (
    CamerasFlag,
    ChunkFlag,
    DeviceFlag,
    DeviceTargetFlag,
    DpCacheFlag,
    EpFlag,
    FuseExpertKvFlag,
    ModelFlag,
    OutFlag,
    PrecisionFlag,
    SeedFlag,
    StepsFlag,
    ThreadsFlag,
    arguments_for,
    with_target_options,
)
from vlabench.cli.views.console import notes, show, stderr, stdout, write_json
from vlabench.config import RunConfig
from vlabench.errors import InputError, InvalidResultError


def run(
    ctx: typer.Context,
    model: ModelFlag = None,
    device: DeviceFlag = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help="torch, torch-compile, onnxruntime, openvino, tensorrt; a comma list; or all. [default: torch]"
        ),
    ] = None,
    ep: EpFlag = None,
    device_target: DeviceTargetFlag = None,
    compile_mode: Annotated[
        str | None, typer.Option(help="torch.compile mode for torch-compile. [default: default]")
    ] = None,
    fuse_denoise_loop: Annotated[
        bool | None,
        typer.Option(
            "--fuse-denoise-loop", help="torch-compile on CUDA: replay the whole denoise loop as a CUDA graph."
        ),
    ] = None,
    precision: PrecisionFlag = None,
    cameras: CamerasFlag = None,
    steps: StepsFlag = None,
    chunk: ChunkFlag = None,
    actions_per_chunk: Annotated[
        int | None, typer.Option(help="Actions executed per chunk, for the action rate. [default: the model's]")
    ] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up inferences. [default: 2]")] = None,
    min_iterations: Annotated[int | None, typer.Option(help="Minimum timed inferences. [default: 10]")] = None,
    min_duration_s: Annotated[
        float | None, typer.Option("--min-duration", help="Minimum timed seconds. [default: 10]")
    ] = None,
    max_iterations: Annotated[int | None, typer.Option(help="Cap on timed inferences. [default: 1000]")] = None,
    control_hz: Annotated[float | None, typer.Option(help="Robot control-rate target, Hz. [default: 10]")] = None,
    seed: SeedFlag = None,
    threads: ThreadsFlag = None,
    out: OutFlag = None,
    energy_meter: Annotated[
        str | None,
        typer.Option(help="auto, nvml, jetson-ina3221, tegrastats, rapl, estimated or none. [default: auto]"),
    ] = None,
    energy_log: Annotated[
        Path | None, typer.Option(help="CSV log (timestamp,watts) of an external power meter covering the run.")
    ] = None,
    energy_window_s: Annotated[
        float | None,
        typer.Option("--energy-window", help="Energy window: whole inferences lasting at least this, s. [default: 2]"),
    ] = None,
    idle_window_s: Annotated[
        float | None, typer.Option("--idle-window", help="Idle-power window before it, s. [default: 1]")
    ] = None,
    tdp_w: Annotated[float | None, typer.Option(help="TDP for estimated energy, W. [default: the profile's]")] = None,
    idle_w: Annotated[float | None, typer.Option(help="Idle power for estimated energy, W.")] = None,
    price_usd: Annotated[float | None, typer.Option(help="Purchase price, USD. [default: the profile's]")] = None,
    lifetime_years: Annotated[float | None, typer.Option(help="Amortization period, years. [default: 3]")] = None,
    duty_cycle: Annotated[
        float | None, typer.Option(help="Share of time the robot operates, 0–1. [default: 0.5]")
    ] = None,
    usd_per_kwh: Annotated[float | None, typer.Option(help="Electricity price, USD/kWh. [default: 0.15]")] = None,
    measure_ceilings: Annotated[
        bool | None,
        typer.Option(
            "--measure-ceilings", help="Measure GEMM peak and bandwidth first (stored in the roofline block)."
        ),
    ] = None,
    dp_cache: DpCacheFlag = None,
    fuse_expert_kv: FuseExpertKvFlag = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(help="lerobot model.safetensors (or its folder) to load instead of seeded weights."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML file with any of these settings; flags override it.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result JSON on stdout instead of tables.")] = False,
) -> None:
    """Measure one model on this host, phase by phase, and write a JSON result."""
    from vlabench.cli.views.run import RunProgress, comparison_table, plan_summary, result_tables
    from vlabench.commands.run import execute_many, plan_runs
    from vlabench.results.schema import write_result

    run_config = build_run_config(ctx)
    plans, skipped = plan_runs(run_config)
    info = notes(as_json)
    info.print(plan_summary(plans))
    for reason in skipped:
        stderr.print(f"[yellow]skipped backend[/] {reason}", highlight=False)
    with RunProgress(stderr) as progress:
        results = execute_many(plans, progress.update)
    paths = [write_result(result, run_config.out) for result in results]
    if as_json:
        payload = [result.model_dump(mode="json") for result in results]
        write_json(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2))
    elif len(results) == 1:
        for renderable in result_tables(results[0]):
            stdout.print(renderable)
    else:
        stdout.print(comparison_table(results))
    for path in paths:
        info.print(f"result: [bold]{path}[/]")
    if any(not result.valid for result in results):
        stderr.print("[bold red]INVALID:[/] a run failed the correctness gate; its result is kept but never ranked")
        raise InvalidResultError


@with_target_options
def profile(
    ctx: typer.Context,
    iterations: Annotated[int, typer.Option(help="Minimum traced inferences.")] = 5,
    min_duration: Annotated[float, typer.Option(help="Minimum traced seconds (for enough counter samples).")] = 2.0,
    kernels: Annotated[
        bool, typer.Option("--kernels", help="Add a torch-profiler pass: operator and CUDA kernel events.")
    ] = False,
    sample_ms: Annotated[
        float | None, typer.Option(help="Counter sampling period, ms. [default: 50 CPU, 20 NVML, 100 tegrastats]")
    ] = None,
    ceilings: Annotated[
        bool,
        typer.Option(
            "--measure-ceilings/--no-measure-ceilings",
            help="Measure GEMM peak and memory bandwidth first (the roofline verdicts use them).",
        ),
    ] = True,
    warmup: Annotated[int | None, typer.Option(help="Warm-up inferences. [default: 2]")] = None,
    seed: SeedFlag = None,
    threads: ThreadsFlag = None,
    out: OutFlag = None,
    config: Annotated[Path | None, typer.Option(help="YAML run config; flags override it.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile JSON instead of tables.")] = False,
    **target: Any,
) -> None:
    """Trace phases with utilization counters (Chrome/Perfetto JSON) and summarize each phase against the roofline."""
    from vlabench.cli.views.roofline import passes_table, profile_table
    from vlabench.commands.profile import ProfileSettings, run_profile

    if iterations < 1 or min_duration < 0 or (sample_ms is not None and sample_ms <= 0):
        raise InputError("--iterations must be ≥ 1, --min-duration ≥ 0 and --sample-ms > 0")
    run_config = build_run_config(ctx)
    if run_config.backend in ("all",) or "," in run_config.backend:
        raise InputError("vlabench profile takes one --backend")
    settings = ProfileSettings(
        iterations=iterations,
        min_duration_s=min_duration,
        kernels=kernels,
        sample_period_s=sample_ms / 1e3 if sample_ms else None,
        measure_ceilings=ceilings,
    )
    stderr.print(f"profiling {run_config.model} ({run_config.backend}) …")
    result = run_profile(run_config, settings, run_config.out)
    show(
        as_json,
        result,
        [passes_table(result), profile_table(result)],
        f"trace: [bold]{run_config.out / result.trace_file}[/] (open in https://ui.perfetto.dev or chrome://tracing)",
        f"profile: [bold]{run_config.out / (result.stem() + '.profile.json')}[/]",
    )


@with_target_options
def loop(
    ctx: typer.Context,
    fusion_stale_steps: Annotated[
        int, typer.Option(help="V-AEFusion: denoising steps run on the previous cycle's prefix (0 = off).")
    ] = 5,
    dp_cache: DpCacheFlag = None,
    fuse_expert_kv: FuseExpertKvFlag = None,
    cycles: Annotated[int, typer.Option(help="Counted control cycles per loop.")] = 10,
    warmup_cycles: Annotated[int, typer.Option("--warmup", help="Uncounted cycles after the first.")] = 1,
    seed: SeedFlag = None,
    threads: ThreadsFlag = None,
    out: OutFlag = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the loop JSON instead of a table.")] = False,
    **target: Any,
) -> None:
    """Time a control loop with V-AEFusion against the exact loop: per-cycle latency, action rate, overlap."""
    from vlabench.cli.views.loop import loop_table
    from vlabench.commands.loop import run_loop

    if cycles < 1 or warmup_cycles < 0:
        raise InputError("--cycles must be ≥ 1 and --warmup ≥ 0")
    run_config = build_run_config(ctx)
    result = run_loop(run_config, fusion_stale_steps, cycles, warmup_cycles, run_config.out)
    show(as_json, result, [loop_table(result)])
    for message in result.warnings:
        stderr.print(f"[yellow]warning:[/] {message}", highlight=False)
    notes(as_json).print(f"loop: [bold]{run_config.out / (result.stem() + '.loop.json')}[/]")


def build_run_config(ctx: typer.Context) -> RunConfig:
    """The ``--config`` file's settings (if any) overridden by the flags given, i.e. the command's parameters named
    like a RunConfig field whose value is not None; one clear error, naming the flags, if the result is invalid."""
    config = ctx.params.get("config")
    base = load_config_file(config) if config else RunConfig()
    given = {name: value for name, value in arguments_for(ctx, RunConfig.model_fields).items() if value is not None}
    try:
        return RunConfig.model_validate({**base.model_dump(), **given})
    except ValidationError as exc:
        flags = run_flags(ctx)
        problems = "; ".join(f"{flags[str(error['loc'][0])]}: {error['msg']}" for error in exc.errors())
        raise InputError(f"invalid option: {problems}") from None


def run_flags(ctx: typer.Context) -> dict[str, str]:
    """RunConfig field → the flag that sets it, as ``vlabench run`` declares them (it has one for every field)."""
    root = ctx.find_root()
    return {param.name: param.opts[0] for param in root.command.get_command(root, "run").params if param.name}


def load_config_file(path: Path) -> RunConfig:
    from vlabench.yaml_data import parse_yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_yaml(text, RunConfig, str(path), "run config", empty_ok=True)
