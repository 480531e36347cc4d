"""``vlabench run``, ``profile`` and ``loop``: the commands that measure a model on this host from a RunConfig."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

import vlabench.cli.serving_options as serving
from vlabench.cli.options import (
    ENERGY_METER_HELP,
    RUN_DEFAULTS,
    ActionsPerChunkFlag,
    BackendsFlag,
    BatchFlag,
    Bounds,
    CamerasFlag,
    ChunkFlag,
    DeviceFlag,
    DeviceTargetFlag,
    DpCacheFlag,
    EnergyOption,
    EpFlag,
    ExecutionFlag,
    FuseDenoiseLoopFlag,
    FuseExpertKvFlag,
    MaxWaitFlag,
    ModelFlag,
    OptimizationOption,
    OutFlag,
    OutputOption,
    PrecisionFlag,
    QuantSchemeFlag,
    RemoteFlag,
    RequestTimeoutFlag,
    SeedFlag,
    ServeDurationFlag,
    StepsFlag,
    TargetOption,
    ThreadsFlag,
    TimingOption,
    WarmupFlag,
    contextual,
    number_option,
    run_option,
    with_target_options,
)
from vlabench.cli.run_config import build_run_config
from vlabench.cli.serve import partial_error
from vlabench.cli.views.console import markup_safe, notes, show, stderr, stdout, write_json
from vlabench.errors import InputError, InvalidResultError, VlabenchError
from vlabench.measure.stats import P99_BOUND_SAMPLES

ProfilingOption = partial(typer.Option, rich_help_panel="Profiling")


def run(
    ctx: typer.Context,
    model: ModelFlag = RUN_DEFAULTS.model,
    device: DeviceFlag = RUN_DEFAULTS.device,
    backend: BackendsFlag = RUN_DEFAULTS.backend,
    ep: EpFlag = None,
    device_target: DeviceTargetFlag = None,
    precision: PrecisionFlag = None,
    quant_scheme: QuantSchemeFlag = None,
    compile_mode: Annotated[
        str, TargetOption(help="torch.compile mode for torch-compile.")
    ] = RUN_DEFAULTS.compile_mode,
    checkpoint: Annotated[
        Path | None,
        TargetOption(help="lerobot model.safetensors (or its folder) to load instead of seeded weights."),
    ] = None,
    cameras: CamerasFlag = None,
    steps: StepsFlag = None,
    chunk: ChunkFlag = None,
    batch: BatchFlag = RUN_DEFAULTS.batch,
    robots: serving.RobotsFlag = None,
    max_wait_ms: MaxWaitFlag = RUN_DEFAULTS.max_wait_ms,
    serve_duration_s: ServeDurationFlag = RUN_DEFAULTS.serve_duration_s,
    remote: RemoteFlag = None,
    request_timeout_s: RequestTimeoutFlag = RUN_DEFAULTS.request_timeout_s,
    max_robots: serving.MaxRobotsFlag = RUN_DEFAULTS.max_robots,
    arrivals: serving.ArrivalsFlag = RUN_DEFAULTS.arrivals,
    connect_timeout_s: serving.ConnectTimeoutFlag = RUN_DEFAULTS.connect_timeout_s,
    encoding: serving.EncodingFlag = RUN_DEFAULTS.encoding,
    jpeg_quality: serving.JpegQualityFlag = RUN_DEFAULTS.jpeg_quality,
    link: serving.LinkFlag = None,
    tls_ca: serving.TlsCaFlag = None,
    tls_cert: serving.TlsCertFlag = None,
    tls_key: serving.TlsKeyFlag = None,
    token_file: serving.TokenFileFlag = None,
    seed: SeedFlag = RUN_DEFAULTS.seed,
    warmup: WarmupFlag = RUN_DEFAULTS.warmup,
    min_iterations: Annotated[
        int | None,
        run_option(
            "min_iterations",
            option=TimingOption,
            help=contextual("Minimum timed inferences.", str(P99_BOUND_SAMPLES)),
        ),
    ] = None,
    min_duration_s: Annotated[
        float, run_option("min_duration_s", "--min-duration", option=TimingOption, help="Minimum timed seconds.")
    ] = RUN_DEFAULTS.min_duration_s,
    max_iterations: Annotated[
        int, run_option("max_iterations", option=TimingOption, help="Cap on timed inferences.")
    ] = RUN_DEFAULTS.max_iterations,
    max_duration_s: Annotated[
        float,
        run_option(
            "max_duration_s",
            "--max-duration",
            option=TimingOption,
            help="Cap on timed seconds (stops short of --min-iterations).",
        ),
    ] = RUN_DEFAULTS.max_duration_s,
    duration_s: Annotated[
        float | None,
        run_option(
            "duration_s",
            "--duration",
            option=TimingOption,
            help="Sustained run: time for exactly this many seconds (replaces the four settings above).",
        ),
    ] = None,
    window_s: Annotated[
        float, run_option("window_s", "--window", option=TimingOption, help="Latency percentiles per window, s.")
    ] = RUN_DEFAULTS.window_s,
    idle_probe_s: Annotated[
        float,
        run_option(
            "idle_probe_s",
            "--idle-probe",
            option=TimingOption,
            help="Idle this long after timing, then time one inference (0: not measured), s.",
        ),
    ] = RUN_DEFAULTS.idle_probe_s,
    sensor_period_s: Annotated[
        float,
        run_option(
            "sensor_period_s",
            "--sensor-period",
            option=TimingOption,
            help="Thermal, clock and throttle sensors' period, s.",
        ),
    ] = RUN_DEFAULTS.sensor_period_s,
    preprocess: Annotated[
        bool,
        TimingOption(
            "--preprocess/--no-preprocess",
            help="Time the input pipeline (tokenize, resize and normalize camera frames, normalize the state; "
            "unnormalize the actions) inside end-to-end, as a deployed policy runs it.",
        ),
    ] = RUN_DEFAULTS.preprocess,
    threads: ThreadsFlag = None,
    control_hz: Annotated[
        float, run_option("control_hz", option=TimingOption, help="Robot control-rate target, Hz.")
    ] = RUN_DEFAULTS.control_hz,
    execution: ExecutionFlag = RUN_DEFAULTS.execution,
    actions_per_chunk: ActionsPerChunkFlag = None,
    energy_meter: Annotated[str, EnergyOption(help=ENERGY_METER_HELP)] = RUN_DEFAULTS.energy_meter,
    energy_log: Annotated[
        Path | None, EnergyOption(help="CSV log (timestamp,watts) of an external power meter covering the run.")
    ] = None,
    energy_window_s: Annotated[
        float,
        run_option(
            "energy_window_s",
            "--energy-window",
            option=EnergyOption,
            help="Energy window: whole inferences lasting at least this, s.",
        ),
    ] = RUN_DEFAULTS.energy_window_s,
    idle_window_s: Annotated[
        float, run_option("idle_window_s", "--idle-window", option=EnergyOption, help="Idle-power window before it, s.")
    ] = RUN_DEFAULTS.idle_window_s,
    tdp_w: Annotated[
        float | None,
        run_option("tdp_w", option=EnergyOption, help=contextual("TDP for estimated energy, W.", "the profile's")),
    ] = None,
    idle_w: Annotated[
        float | None, run_option("idle_w", option=EnergyOption, help="Idle power for estimated energy (≤ TDP), W.")
    ] = None,
    price_usd: Annotated[
        float | None,
        run_option("price_usd", option=EnergyOption, help=contextual("Purchase price, USD.", "the profile's")),
    ] = None,
    lifetime_years: Annotated[
        float, run_option("lifetime_years", option=EnergyOption, help="Amortization period, years.")
    ] = RUN_DEFAULTS.lifetime_years,
    duty_cycle: Annotated[
        float, run_option("duty_cycle", option=EnergyOption, help="Share of time the robot operates.")
    ] = RUN_DEFAULTS.duty_cycle,
    usd_per_kwh: Annotated[
        float, run_option("usd_per_kwh", option=EnergyOption, help="Electricity price, USD/kWh.")
    ] = RUN_DEFAULTS.usd_per_kwh,
    dp_cache: DpCacheFlag = None,
    fuse_expert_kv: FuseExpertKvFlag = False,
    fuse_denoise_loop: FuseDenoiseLoopFlag = False,
    measure_ceilings: Annotated[
        bool,
        OptimizationOption(
            "--measure-ceilings", help="Measure GEMM peak and bandwidth first (stored in the roofline block)."
        ),
    ] = False,
    out: OutFlag = RUN_DEFAULTS.out,
    config: Annotated[
        Path | None, OutputOption(help="YAML file with any of these settings; flags override it.")
    ] = None,
    as_json: Annotated[bool, OutputOption("--json", help="Print the result JSON on stdout instead of tables.")] = False,
) -> None:
    """Measure one model on this host, phase by phase, and write a JSON result."""
    from vlabench.cli.views.run import RunProgress, comparison, plan_summary, result_tables
    from vlabench.commands.run import execute_runs, plan_runs, save_result

    run_config = build_run_config(ctx)
    if run_config.remote:
        from vlabench.cli.serve import run_remote_robots

        saved_remote, fault = run_remote_robots(run_config, as_json)
        report_unsaved([saved_remote] if saved_remote.problem else [], run_config.out)
        if fault is not None:
            raise fault
        return
    plans, skipped = plan_runs(run_config)
    info = notes(as_json)
    info.print(plan_summary(plans))
    for reason in skipped:
        stderr.print(f"[yellow]skipped backend[/] {markup_safe(reason)}", highlight=False)
    with RunProgress(stderr) as progress:
        outcome = execute_runs(plans, progress.update, lambda text: info.print(markup_safe(text), highlight=False))
    results = outcome.results
    saved = [save_result(result, run_config.out) for result in results]
    if as_json:
        payload = [result.model_dump(mode="json") for result in results]
        write_json(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2))
    elif len(results) == 1:
        for renderable in result_tables(results[0]):
            stdout.print(renderable)
    elif results:
        for renderable in comparison(results):
            stdout.print(renderable)
    for entry in saved:
        if entry.problem is None:
            # never broken by Rich: the terminal wraps it, so the path stays copyable
            info.print(f"result: [bold]{markup_safe(entry.path)}[/]", soft_wrap=True)
    if any(not result.valid for result in results):
        stderr.print("[bold red]INVALID:[/] a run failed the correctness gate; its result is kept but never ranked")
    report_unsaved([entry for entry in saved if entry.problem is not None], run_config.out)
    stopped = next((result for result in results if result.status == "partial"), None)
    if stopped is not None:
        raise partial_error(stopped)
    if outcome.crashes:
        kept = f"; the other backends' results are saved ({len(results)})" if results else ""
        raise VlabenchError("; ".join(crash.message for crash in outcome.crashes) + kept)
    if any(not result.valid for result in results):
        raise InvalidResultError


def report_unsaved(unsaved: list[Any], out: Path) -> None:
    """Results that could not be written into ``out`` (a full disk, a quota, an I/O error): say where each went
    instead (its JSON printed on stderr when even the fallback file failed), then exit 1."""
    if not unsaved:
        return
    places = []
    for entry in unsaved:
        if entry.path is None:
            sys.stderr.write(entry.text + "\n")
        places.append(str(entry.path) if entry.path else "stderr above (the fallback file failed too)")
    raise VlabenchError(
        f"{unsaved[0].problem}; the measurement is not lost: saved to {', '.join(places)}; move it into {out} "
        "once it can be written"
    )


@with_target_options
def profile(
    ctx: typer.Context,
    iterations: Annotated[
        int, number_option(Bounds(1, 100_000, integer=True), option=TimingOption, help="Minimum traced inferences.")
    ] = 5,
    min_duration: Annotated[
        float,
        run_option("min_duration_s", option=TimingOption, help="Minimum traced seconds (for enough counter samples)."),
    ] = 2.0,
    warmup: WarmupFlag = RUN_DEFAULTS.warmup,
    threads: ThreadsFlag = None,
    kernels: Annotated[
        bool, ProfilingOption("--kernels", help="Add a torch-profiler pass: operator and CUDA kernel events.")
    ] = False,
    sample_ms: Annotated[
        float | None,
        number_option(
            Bounds(0.0, 60_000.0, open_below=True),
            option=ProfilingOption,
            help=contextual("Counter sampling period, ms.", "50 CPU, 20 NVML, 100 tegrastats"),
        ),
    ] = None,
    ceilings: Annotated[
        bool,
        ProfilingOption(
            "--measure-ceilings/--no-measure-ceilings",
            help="Measure GEMM peak and memory bandwidth first (the roofline verdicts use them).",
        ),
    ] = True,
    seed: SeedFlag = RUN_DEFAULTS.seed,
    out: OutFlag = RUN_DEFAULTS.out,
    config: Annotated[Path | None, OutputOption(help="YAML run config; flags override it.")] = None,
    as_json: Annotated[bool, OutputOption("--json", help="Print the profile JSON instead of tables.")] = False,
    **target: Any,
) -> None:
    """Trace phases with utilization counters (Chrome/Perfetto JSON) and summarize each phase against the roofline."""
    from vlabench.cli.views.roofline import passes_table, profile_table
    from vlabench.commands.profile import ProfileSettings, run_profile
    from vlabench.commands.run import check_paths

    run_config = build_run_config(ctx)
    check_paths(run_config)
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
        f"trace: [bold]{markup_safe(run_config.out / result.trace_file)}[/] (open in https://ui.perfetto.dev or chrome://tracing)",
        f"profile: [bold]{markup_safe(run_config.out / (result.stem() + '.profile.json'))}[/]",
    )


@with_target_options
def loop(
    ctx: typer.Context,
    fusion_stale_steps: Annotated[
        int,
        number_option(
            Bounds(0, 10_000, integer=True),
            option=OptimizationOption,
            help="V-AEFusion: denoising steps run on the previous cycle's prefix (0 = off).",
        ),
    ] = 5,
    dp_cache: DpCacheFlag = None,
    fuse_expert_kv: FuseExpertKvFlag = False,
    cycles: Annotated[
        int,
        number_option(Bounds(1, 100_000, integer=True), option=TimingOption, help="Counted control cycles per loop."),
    ] = 10,
    warmup_cycles: Annotated[
        int,
        number_option(
            Bounds(0, 100_000, integer=True), "--warmup", option=TimingOption, help="Uncounted cycles after the first."
        ),
    ] = 1,
    threads: ThreadsFlag = None,
    seed: SeedFlag = RUN_DEFAULTS.seed,
    out: OutFlag = RUN_DEFAULTS.out,
    as_json: Annotated[bool, OutputOption("--json", help="Print the loop JSON instead of a table.")] = False,
    **target: Any,
) -> None:
    """Time a control loop with V-AEFusion against the exact loop: per-cycle latency, action rate, overlap."""
    from vlabench.cli.views.loop import loop_table
    from vlabench.commands.loop import run_loop
    from vlabench.commands.run import check_paths

    run_config = build_run_config(ctx)
    check_paths(run_config)
    result = run_loop(run_config, fusion_stale_steps, cycles, warmup_cycles, run_config.out)
    show(as_json, result, [loop_table(result)])
    for message in result.warnings:
        stderr.print(f"[yellow]warning:[/] {markup_safe(message)}", highlight=False)
    notes(as_json).print(f"loop: [bold]{markup_safe(run_config.out / (result.stem() + '.loop.json'))}[/]")
