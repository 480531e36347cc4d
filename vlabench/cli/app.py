"""The ``vlabench`` command line."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

import vlabench
from vlabench.config import RunConfig
from vlabench.errors import InputError, VlabenchError

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
WIDE = 160  # tables keep their columns when output goes to a file or pipe
out = Console(width=None if sys.stdout.isatty() else WIDE)
err = Console(stderr=True, width=None if sys.stderr.isatty() else WIDE)

EXIT_INVALID = 5
EXIT_INTERRUPTED = 130
PROGRESS_AFTER_S = 3.0

# Options shared by the commands that build a RunConfig (run, profile, loop); None means "not given".
ModelFlag = Annotated[
    str | None, typer.Option("--model", help="Model name (see `vlabench models`). [default: smolvla]")
]
DeviceFlag = Annotated[
    str | None, typer.Option("--device", help="Device profile or alias: auto, cpu, cuda, jetson, … [default: auto]")
]
OneBackendFlag = Annotated[str | None, typer.Option("--backend", help="One backend. [default: torch]")]
EpFlag = Annotated[str | None, typer.Option("--ep", help="onnxruntime execution provider: cpu, cuda, tensorrt, …")]
DeviceTargetFlag = Annotated[
    str | None, typer.Option("--device-target", help="OpenVINO device: CPU, GPU, NPU, AUTO. [default: CPU]")
]
PrecisionFlag = Annotated[
    str | None, typer.Option("--precision", help="fp32, bf16 or fp16. [default: fp32 on CPU, bf16 on CUDA]")
]
CamerasFlag = Annotated[int | None, typer.Option("--cameras", help="Camera count. [default: the model's]")]
StepsFlag = Annotated[int | None, typer.Option("--steps", help="Denoising steps. [default: the model's]")]
SeedFlag = Annotated[int | None, typer.Option("--seed", help="Seed for weights, observations and noise. [default: 0]")]
ThreadsFlag = Annotated[int | None, typer.Option("--threads", help="torch intra-op threads. [default: torch's]")]
OutFlag = Annotated[Path | None, typer.Option("--out", help="Results folder. [default: results]")]
DpCacheFlag = Annotated[
    str | None,
    typer.Option(
        "--dp-cache", help="DP-Cache: computed steps {0,1,2,6,8,9}, segment:A-B/S, or a `calibrate dp-cache` file."
    ),
]
FuseExpertKvFlag = Annotated[
    bool | None,
    typer.Option("--fuse-expert-kv", help="torch: compute the expert's prefix K/V work once per inference."),
]


def reports_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn vlabench errors into one red line and the documented exit code, never a traceback."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except VlabenchError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("[bold red]interrupted[/]: no result was written")
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


def version_callback(value: bool) -> None:
    if value:
        out.print(f"vlabench {vlabench.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Benchmark Vision-Language-Action policies phase by phase: latency, control rate, memory."""


def load_config_file(path: Path) -> RunConfig:
    from vlabench.yaml_data import parse_yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_yaml(text, RunConfig, str(path), "run config", empty_ok=True)


@app.command()
@reports_errors
def run(
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
    chunk: Annotated[int | None, typer.Option(help="Action chunk length. [default: the model's]")] = None,
    actions_per_chunk: Annotated[
        int | None, typer.Option(help="Actions executed per chunk, for the action rate. [default: the model's]")
    ] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up inferences. [default: 2]")] = None,
    min_iterations: Annotated[int | None, typer.Option(help="Minimum timed inferences. [default: 10]")] = None,
    min_duration: Annotated[float | None, typer.Option(help="Minimum timed seconds. [default: 10]")] = None,
    max_iterations: Annotated[int | None, typer.Option(help="Cap on timed inferences. [default: 1000]")] = None,
    control_hz: Annotated[float | None, typer.Option(help="Robot control-rate target, Hz. [default: 10]")] = None,
    seed: SeedFlag = None,
    threads: ThreadsFlag = None,
    out_dir: OutFlag = None,
    energy_meter: Annotated[
        str | None,
        typer.Option(help="auto, nvml, jetson-ina3221, tegrastats, rapl, estimated or none. [default: auto]"),
    ] = None,
    energy_log: Annotated[
        Path | None, typer.Option(help="CSV log (timestamp,watts) of an external power meter covering the run.")
    ] = None,
    energy_window: Annotated[
        float | None, typer.Option(help="Energy window: whole inferences lasting at least this, s. [default: 2]")
    ] = None,
    idle_window: Annotated[float | None, typer.Option(help="Idle-power window before it, s. [default: 1]")] = None,
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
    from vlabench.commands.run import execute_many, plan_runs
    from vlabench.results.schema import write_result

    flags = {
        "model": model,
        "device": device,
        "backend": backend,
        "ep": ep,
        "device_target": device_target,
        "compile_mode": compile_mode,
        "fuse_denoise_loop": fuse_denoise_loop,
        "precision": precision,
        "cameras": cameras,
        "steps": steps,
        "chunk": chunk,
        "actions_per_chunk": actions_per_chunk,
        "warmup": warmup,
        "min_iterations": min_iterations,
        "min_duration_s": min_duration,
        "max_iterations": max_iterations,
        "control_hz": control_hz,
        "seed": seed,
        "threads": threads,
        "out": out_dir,
        "energy_meter": energy_meter,
        "energy_log": energy_log,
        "energy_window_s": energy_window,
        "idle_window_s": idle_window,
        "tdp_w": tdp_w,
        "idle_w": idle_w,
        "price_usd": price_usd,
        "lifetime_years": lifetime_years,
        "duty_cycle": duty_cycle,
        "usd_per_kwh": usd_per_kwh,
        "measure_ceilings": measure_ceilings,
        "dp_cache": dp_cache,
        "fuse_expert_kv": fuse_expert_kv,
        "checkpoint": checkpoint,
    }
    run_config = build_run_config(config, flags)
    plans, skipped = plan_runs(run_config)
    info = err if as_json else out
    from vlabench.cli.views.run import comparison_table, plan_summary, result_tables

    info.print(plan_summary(plans))
    for reason in skipped:
        err.print(f"[yellow]skipped backend[/] {reason}", highlight=False)
    with RunProgress(err) as progress:
        results = execute_many(plans, progress.update)
    paths = [write_result(result, run_config.out) for result in results]
    if as_json:
        payload = (
            results[0].model_dump(mode="json") if len(results) == 1 else [r.model_dump(mode="json") for r in results]
        )
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    elif len(results) == 1:
        for renderable in result_tables(results[0]):
            out.print(renderable)
    else:
        out.print(comparison_table(results))
    for path in paths:
        info.print(f"result: [bold]{path}[/]")
    if any(not result.valid for result in results):
        err.print("[bold red]INVALID:[/] a run failed the correctness gate; its result is kept but never ranked")
        raise typer.Exit(EXIT_INVALID)


def build_run_config(config: Path | None, flags: dict[str, Any]) -> RunConfig:
    """The YAML file's settings (if any) overridden by the flags that were given; one clear error if invalid."""
    base = load_config_file(config) if config else RunConfig()
    try:
        return RunConfig.model_validate({**base.model_dump(), **{k: v for k, v in flags.items() if v is not None}})
    except ValidationError as exc:
        problems = "; ".join(f"--{option_name(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise InputError(f"invalid option: {problems}") from None


def option_name(location: tuple) -> str:
    name = ".".join(map(str, location)).replace("_", "-")
    return name.removesuffix("-s") if name.endswith(("-window-s", "-duration-s")) else name


class RunProgress:
    """A progress bar that appears only once a run is expected to take more than a few seconds."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.task = None

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar:
            self.bar.stop()

    def update(self, done: int, expected: int) -> None:
        elapsed = time.monotonic() - self.started
        if self.bar is None:
            if elapsed / done * (expected - done) < PROGRESS_AFTER_S or not self.console.is_terminal:
                return
            self.bar = Progress(
                TextColumn("timing"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("timing", total=expected)
        self.bar.update(self.task, completed=done, total=expected)


@app.command()
@reports_errors
def models(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False) -> None:
    """List the model replicas: parameters, prefix tokens, denoising steps, chunk."""
    from vlabench.cli.views.run import model_rows, models_table

    rows = model_rows()
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        out.print(models_table(rows))


@app.command()
@reports_errors
def devices(
    measure: Annotated[
        bool, typer.Option("--measure", help="Measure GEMM peak and memory bandwidth on this host's device.")
    ] = False,
    precision: Annotated[
        list[str] | None, typer.Option(help="GEMM precision(s) to measure. [default: fp32 on CPU, bf16 on CUDA]")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the device profiles and mark the hardware detected on this host."""
    from vlabench.cli.views.run import ceilings_table, device_rows, devices_table

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
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    out.print(devices_table(rows))
    out.print(host_line)
    if ceilings is not None:
        out.print(ceilings_table(*ceilings))


def measured_ceilings(precisions: list[str] | None):
    """Ceilings of the device ``--device auto`` picks, measured now (a few seconds per quantity)."""
    from vlabench.hardware.devices import resolve_device
    from vlabench.kernels.ceilings import measure_ceilings
    from vlabench.vocab import Precision

    resolved = resolve_device("auto")
    default = [Precision.default(resolved.torch_device.type != "cuda", Precision.REDUCED)]
    chosen = tuple(Precision.parse(p) for p in (precisions or default))
    err.print(f"measuring ceilings of {resolved.profile.name} on {resolved.torch_device} …")
    return resolved, measure_ceilings(resolved.torch_device, chosen)


@app.command()
@reports_errors
def rank(
    paths: Annotated[list[Path], typer.Argument(help="Result files or folders (searched recursively).")],
    priority: Annotated[str, typer.Option(help="cost, energy or time.")] = "cost",
    control_hz: Annotated[float, typer.Option(help="Control-rate target for the feasibility gate, Hz.")] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows instead of a table.")] = False,
) -> None:
    """Rank results by CET: gate on memory and control rate (p99), order by the priority, flag the Pareto set."""
    from vlabench.analysis.cet import rank as rank_frame
    from vlabench.cli.views.run import rank_table
    from vlabench.results.aggregate import load_results, results_frame

    if control_hz <= 0:
        raise InputError("--control-hz must be positive")
    loaded, skipped = load_results(paths)
    for problem in skipped:
        err.print(f"[yellow]skipped[/] {problem}", highlight=False)
    if not loaded:
        raise InputError(f"no readable results under {', '.join(map(str, paths))}")
    ranked = rank_frame(results_frame(loaded, control_hz), priority, control_hz)
    if as_json:
        sys.stdout.write(ranked.to_json(orient="records", indent=2) + "\n")
    else:
        out.print(rank_table(ranked, priority, control_hz))


@app.command()
@reports_errors
def profile(
    model: ModelFlag = None,
    device: DeviceFlag = None,
    backend: OneBackendFlag = None,
    ep: EpFlag = None,
    device_target: DeviceTargetFlag = None,
    precision: PrecisionFlag = None,
    cameras: CamerasFlag = None,
    steps: StepsFlag = None,
    iterations: Annotated[int, typer.Option(help="Minimum traced inferences.")] = 5,
    min_duration: Annotated[float, typer.Option(help="Minimum traced seconds (for enough counter samples).")] = 2.0,
    kernels: Annotated[
        bool, typer.Option("--kernels", help="Add a torch-profiler pass: operator and CUDA kernel events.")
    ] = False,
    sample_ms: Annotated[
        float | None, typer.Option(help="Counter sampling period, ms. [default: 50 CPU, 20 NVML, 100 tegrastats]")
    ] = None,
    measure_ceilings: Annotated[
        bool, typer.Option(help="Measure GEMM peak and memory bandwidth first (the roofline verdicts use them).")
    ] = True,
    warmup: Annotated[int | None, typer.Option(help="Warm-up inferences. [default: 2]")] = None,
    seed: SeedFlag = None,
    threads: ThreadsFlag = None,
    out_dir: OutFlag = None,
    config: Annotated[Path | None, typer.Option(help="YAML run config; flags override it.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile JSON instead of tables.")] = False,
) -> None:
    """Trace phases with utilization counters (Chrome/Perfetto JSON) and summarize each phase against the roofline."""
    from vlabench.cli.views.roofline import passes_table, profile_table
    from vlabench.commands.profile import ProfileSettings, run_profile

    if iterations < 1 or min_duration < 0 or (sample_ms is not None and sample_ms <= 0):
        raise InputError("--iterations must be ≥ 1, --min-duration ≥ 0 and --sample-ms > 0")
    flags = {
        "model": model,
        "device": device,
        "backend": backend,
        "ep": ep,
        "device_target": device_target,
        "precision": precision,
        "cameras": cameras,
        "steps": steps,
        "warmup": warmup,
        "seed": seed,
        "threads": threads,
        "out": out_dir,
    }
    run_config = build_run_config(config, flags)
    if run_config.backend in ("all",) or "," in run_config.backend:
        raise InputError("vlabench profile takes one --backend")
    settings = ProfileSettings(
        iterations=iterations,
        min_duration_s=min_duration,
        kernels=kernels,
        sample_period_s=sample_ms / 1e3 if sample_ms else None,
        measure_ceilings=measure_ceilings,
    )
    err.print(f"profiling {run_config.model} ({run_config.backend}) …")
    result = run_profile(run_config, settings, run_config.out)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        out.print(passes_table(result))
        out.print(profile_table(result))
    info = err if as_json else out
    info.print(
        f"trace: [bold]{run_config.out / result.trace_file}[/] (open in https://ui.perfetto.dev or chrome://tracing)"
    )
    info.print(f"profile: [bold]{run_config.out / (result.stem() + '.profile.json')}[/]")


@app.command()
@reports_errors
def roofline(
    model: Annotated[str, typer.Option(help="Model name.")] = "smolvla",
    device: Annotated[str, typer.Option(help="Any device profile (present or not), or auto/cpu/cuda/jetson.")] = "auto",
    precision: Annotated[
        str | None, typer.Option(help="fp32, bf16, fp16. [default: fp32 on CPUs, else bf16 or fp16 from the profile]")
    ] = None,
    cameras: Annotated[int | None, typer.Option(help="Camera count. [default: the model's]")] = None,
    steps: Annotated[int | None, typer.Option(help="Denoising steps. [default: the model's]")] = None,
    chunk: Annotated[int | None, typer.Option(help="Action chunk length. [default: the model's]")] = None,
    measure_ceilings: Annotated[
        bool | None,
        typer.Option(help="Measure GEMM peak and bandwidth here. [default: when the device is this host]"),
    ] = None,
    result: Annotated[
        Path | None, typer.Option(help="A `vlabench run` result: achieved FLOP/s from its measured phase latencies.")
    ] = None,
    efficiency: Annotated[
        float | None, typer.Option(help="Projection: share of the roofline the device reaches (0–1). [default: 1]")
    ] = None,
    calibrate: Annotated[
        Path | None, typer.Option(help="Projection: take per-phase efficiency from this measured result.")
    ] = None,
    control_hz: Annotated[float, typer.Option(help="Control-rate target for the feasibility verdict, Hz.")] = 10.0,
    layers: Annotated[bool, typer.Option(help="Print the per-layer table (VLM and expert).")] = True,
    top: Annotated[int, typer.Option(help="Heaviest operator kinds to list.")] = 12,
    html: Annotated[bool, typer.Option(help="Write the interactive roofline chart (HTML) into --out.")] = True,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the chart.")] = Path("results"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """FLOPs and bytes per phase, layer and operator against datasheet and measured ceilings; projection to any
    profiled device with a feasibility verdict."""
    from vlabench.analysis.roofline_chart import write_roofline_html
    from vlabench.cli.views.roofline import roofline_renderables
    from vlabench.commands.roofline import RooflineRequest, default_precision, resolve_profile, run_roofline
    from vlabench.vocab import Precision

    if control_hz <= 0 or top < 0:
        raise InputError("--control-hz must be positive and --top non-negative")
    chosen = Precision.parse(precision) if precision else default_precision(resolve_profile(device)[0])
    request = RooflineRequest(
        model=model,
        device=device,
        precision=chosen,
        cameras=cameras,
        steps=steps,
        chunk=chunk,
        measure_ceilings=measure_ceilings,
        result=result,
        efficiency=efficiency,
        calibrate=calibrate,
        control_hz=control_hz,
    )
    outcome = run_roofline(request)
    outcome.report.operators = outcome.report.operators[:top]
    chart = None
    if html:
        report = outcome.report
        chart = write_roofline_html(
            report, out_dir / f"{report.model}_{report.device}_{report.precision}.roofline.html"
        )
    if as_json:
        sys.stdout.write(outcome.model_dump_json(indent=2) + "\n")
    else:
        for renderable in roofline_renderables(outcome, layers):
            out.print(renderable)
    if chart is not None:
        (err if as_json else out).print(f"chart: [bold]{chart}[/]")


@app.command()
@reports_errors
def loop(
    model: ModelFlag = None,
    device: DeviceFlag = None,
    backend: OneBackendFlag = None,
    ep: EpFlag = None,
    device_target: DeviceTargetFlag = None,
    precision: PrecisionFlag = None,
    cameras: CamerasFlag = None,
    steps: StepsFlag = None,
    fusion_stale_steps: Annotated[
        int, typer.Option(help="V-AEFusion: denoising steps run on the previous cycle's prefix (0 = off).")
    ] = 5,
    dp_cache: DpCacheFlag = None,
    fuse_expert_kv: FuseExpertKvFlag = None,
    cycles: Annotated[int, typer.Option(help="Counted control cycles per loop.")] = 10,
    warmup: Annotated[int, typer.Option(help="Uncounted cycles after the first.")] = 1,
    seed: SeedFlag = None,
    threads: ThreadsFlag = None,
    out_dir: OutFlag = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the loop JSON instead of a table.")] = False,
) -> None:
    """Time a control loop with V-AEFusion against the exact loop: per-cycle latency, action rate, overlap."""
    from vlabench.cli.views.run import loop_table
    from vlabench.commands.loop import run_loop

    if cycles < 1 or warmup < 0:
        raise InputError("--cycles must be ≥ 1 and --warmup ≥ 0")
    flags = {
        "model": model,
        "device": device,
        "backend": backend,
        "ep": ep,
        "device_target": device_target,
        "precision": precision,
        "cameras": cameras,
        "steps": steps,
        "seed": seed,
        "threads": threads,
        "out": out_dir,
        "dp_cache": dp_cache,
        "fuse_expert_kv": fuse_expert_kv,
    }
    run_config = build_run_config(None, flags)
    result = run_loop(run_config, fusion_stale_steps, cycles, warmup, run_config.out)
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        out.print(loop_table(result))
    for message in result.warnings:
        err.print(f"[yellow]warning:[/] {message}", highlight=False)
    (err if as_json else out).print(f"loop: [bold]{run_config.out / (result.stem() + '.loop.json')}[/]")


calibrate_app = typer.Typer(help="Offline calibrations.", no_args_is_help=True)
app.add_typer(calibrate_app, name="calibrate")


@calibrate_app.command("dp-cache")
@reports_errors
def calibrate_dp_cache_command(
    model: Annotated[str, typer.Option(help="Model name.")] = "smolvla",
    observations: Annotated[int, typer.Option(help="Seeded observations to calibrate on.")] = 32,
    budget: Annotated[
        float, typer.Option(help="Worst relative action error allowed (max |Δ| / max |exact displacement|).")
    ] = 0.05,
    steps: Annotated[int | None, typer.Option(help="Denoising steps. [default: the model's]")] = None,
    cameras: Annotated[int | None, typer.Option(help="Camera count. [default: the model's]")] = None,
    seed: Annotated[int, typer.Option(help="Seed for weights, observations and noise.")] = 0,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Schedule file. [default: results/<model>.dp-cache.json]")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule JSON.")] = False,
) -> None:
    """Pick the DP-Cache schedule with the most skipped steps within an action-error budget; save it for --dp-cache."""
    import torch

    from vlabench.models.specs import load_model_spec
    from vlabench.models.workload import Workload
    from vlabench.optimizations.calibration import calibrate_dp_cache

    if observations < 1 or budget <= 0:
        raise InputError("--observations must be ≥ 1 and --budget positive")
    spec = load_model_spec(model)
    workload = Workload.from_spec(spec, cameras, steps)
    err.print(f"calibrating DP-Cache on {observations} observations of {model} (fp32 eager torch) …")
    schedule = calibrate_dp_cache(spec, workload, observations, budget, seed, torch.device("cpu"))
    path = schedule.write(out_file or Path("results") / f"{model}.dp-cache.json")
    if as_json:
        sys.stdout.write(schedule.model_dump_json(indent=2) + "\n")
    else:
        report = schedule.calibration or {}
        similarity = ", ".join(f"{value:.3f}" for value in report.get("step_similarity", []))
        out.print(f"step-to-step velocity cosine: {similarity}")
        out.print(
            f"schedule: computes {schedule.label()} (skips {len(schedule.skipped)}), worst relative error "
            f"{report.get('error', 0):.4f} within budget {budget:g}; {report.get('candidates_evaluated')} candidates"
        )
    (err if as_json else out).print(f"schedule file: [bold]{path}[/] (use with --dp-cache {path})")


@app.command()
@reports_errors
def fidelity(
    model: Annotated[str, typer.Option(help="Model replica for the open-loop errors.")] = "smolvla",
    observations: Annotated[int, typer.Option(help="Open loop: cycles of a drifting observation sequence.")] = 100,
    closed_loop: Annotated[
        bool, typer.Option(help="Closed loop: success on Gymnasium MuJoCo Reacher-v5 with vlabench's trained policy.")
    ] = True,
    episodes: Annotated[int, typer.Option(help="Closed loop: seeded episodes per variant.")] = 50,
    actions_per_chunk: Annotated[
        int, typer.Option(help="Closed loop: actions executed per predicted chunk (of 8); more is less forgiving.")
    ] = 4,
    seed: Annotated[int, typer.Option(help="Seed for weights, observations, noise and episodes.")] = 0,
    out_dir: Annotated[Path, typer.Option("--out", help="Results folder.")] = Path("results"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the fidelity JSON instead of tables.")] = False,
) -> None:
    """Action error (open loop) and task success (closed loop) of DP-Cache, V-AEFusion and lossless fusion."""
    from vlabench.commands.fidelity import fidelity_tables, run_fidelity

    if observations < 1 or episodes < 1 or not 1 <= actions_per_chunk <= 8:
        raise InputError("--observations and --episodes must be ≥ 1, --actions-per-chunk within 1..8")
    err.print(
        f"open loop: {observations} observations of {model}"
        + (f"; closed loop: {episodes} episodes" if closed_loop else "")
    )
    report, path = run_fidelity(model, observations, episodes if closed_loop else 0, seed, out_dir, actions_per_chunk)
    if as_json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        for table in fidelity_tables(report):
            out.print(table)
    (err if as_json else out).print(f"fidelity: [bold]{path}[/]")


site_app = typer.Typer(help="The static CET leaderboard website.", no_args_is_help=True)
app.add_typer(site_app, name="site")


@site_app.command("build")
@reports_errors
def site_build(
    paths: Annotated[list[Path], typer.Argument(help="Result files or folders (searched recursively).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Site folder (replaced atomically).")] = Path("site"),
    priority: Annotated[str, typer.Option(help="Initial CET priority: cost, energy or time.")] = "cost",
    control_hz: Annotated[float, typer.Option(help="Initial control-rate target, Hz (the page can change it).")] = 10.0,
) -> None:
    """Build the leaderboard (static files with relative links, no CDN) from results folders."""
    from vlabench.leaderboard_site.build import build_site

    report = build_site(paths, out_dir, priority, control_hz)  # type: ignore[arg-type]
    for problem in report.skipped:
        err.print(f"[yellow]skipped[/] {problem}", highlight=False)
    out.print(
        f"site: [bold]{report.site}[/] ({report.rows} leaderboard rows from {report.runs} results, "
        f"{report.pages} pages); open {report.site / 'index.html'} or run `vlabench site serve {report.site}`",
        highlight=False,
    )


@site_app.command("serve")
@reports_errors
def site_serve(
    site: Annotated[Path, typer.Argument(help="A folder written by `vlabench site build`.")],
    port: Annotated[int, typer.Option(help="TCP port on 127.0.0.1.")] = 8000,
) -> None:
    """Preview a built site on http://127.0.0.1:PORT (Ctrl-C stops it)."""
    from vlabench.leaderboard_site.serve import make_server

    server = make_server(site, port)
    out.print(f"serving {site} on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        out.print("stopped")
    finally:
        server.server_close()


# Fleet scale: sweeps (locally or on Ray), Ray worker resources, regression checks, publication checks.
EXIT_CHECK_FAILED = 6
EXIT_SWEEP_FAILED = 7


@app.command()
@reports_errors
def sweep(
    sweep_file: Annotated[
        Path, typer.Argument(metavar="SWEEP.yaml", help="Sweep file: fixed settings, a run-settings matrix, excludes.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the expanded runs in execution order.")] = False,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Results folder. [default: the sweep file's out, else results]")
    ] = None,
    timeout_s: Annotated[
        float | None, typer.Option("--timeout-s", help="Per-run limit, s; the run's process group is then killed.")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray", metavar="ADDRESS", help="Dispatch the runs to this Ray cluster (HOST:PORT).")
    ] = None,
) -> None:
    """Run a matrix of benchmarks, each in a child process; resumable, locally or on a Ray cluster."""
    from vlabench.cli.views.sweep import SweepProgress, runs_table, summary_table
    from vlabench.fleet.local_runner import completed_keys, execute_sweep, run_locally
    from vlabench.fleet.sweep_file import expand, load_sweep

    spec = load_sweep(sweep_file)
    runs = expand(spec, str(sweep_file))
    results = out_dir or spec.out
    timeout = timeout_s if timeout_s is not None else spec.timeout_s
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout-s must be > 0, not {timeout:g}")
    done = completed_keys(results) & {run.key for run in runs}
    if dry_run:
        out.print(runs_table(runs, done, ray=ray_address is not None))
        return
    if ray_address:
        from vlabench.fleet.ray_dispatch import run_on_ray

        dispatch = run_on_ray(ray_address, timeout, spec.max_retries)
    else:
        dispatch = run_locally(timeout)
    started = time.monotonic()
    with SweepProgress(err, len(runs) - len(done)) as progress:
        records = execute_sweep(runs, results, dispatch, progress.started, progress.finished)
    out.print(summary_table(records, time.monotonic() - started))
    out.print(f"results: [bold]{results}[/]  journal: {results / '.sweep'}")
    if any(record.status == "failed" for record in records):
        err.print("[bold red]some runs failed[/] (reasons above); run the same command again to retry them")
        raise typer.Exit(EXIT_SWEEP_FAILED)
    if any(record.status == "invalid" for record in records):
        raise typer.Exit(EXIT_INVALID)


@app.command()
@reports_errors
def worker(
    address: Annotated[
        str | None, typer.Option(help="The head node's HOST:PORT to join; without it, the line starts a head.")
    ] = None,
    port: Annotated[int, typer.Option(help="Port of a head node started here.")] = 6379,
    placement: Annotated[
        list[str] | None, typer.Option("--placement", help="Extra placement label to advertise (repeatable).")
    ] = None,
    detect: Annotated[bool, typer.Option(help="Advertise the device profiles detected on this host.")] = True,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs this node gives Ray. [default: Ray's]")] = None,
    start: Annotated[bool, typer.Option("--start", help="Run the `ray start` line now.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the resources as JSON.")] = False,
) -> None:
    """Print the `ray start` line that advertises this host's devices to a vlabench sweep (or run it)."""
    from vlabench.fleet.worker import detected_device_names, ray_start_command, shell_line, start_ray, worker_resources

    devices = [*(detected_device_names() if detect else []), *(placement or [])]
    if not devices:
        raise InputError("nothing to advertise: give --placement or drop --no-detect")
    resources = worker_resources(devices)
    command = ray_start_command(resources, address, port, num_cpus)
    if as_json:
        sys.stdout.write(json.dumps({"resources": resources, "command": command}, indent=2) + "\n")
    else:
        out.print(shell_line(command), highlight=False, soft_wrap=True)
    if start:
        code = start_ray(command)
        if code:
            raise typer.Exit(code)


@app.command()
@reports_errors
def compare(
    baseline: Annotated[Path, typer.Argument(metavar="BASELINE_DIR", help="Results folder (or file) of reference.")],
    candidate: Annotated[Path, typer.Argument(metavar="CANDIDATE_DIR", help="Results folder (or file) to check.")],
    threshold: Annotated[float, typer.Option(help="Relative latency change that counts, e.g. 0.05 = 5%.")] = 0.05,
    energy_threshold: Annotated[float, typer.Option(help="Relative J/action increase that counts.")] = 0.05,
    confidence: Annotated[float, typer.Option(help="Confidence level of the bootstrap interval.")] = 0.95,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 5000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    phase: Annotated[str, typer.Option(help="Latency phase compared (e2e, prefix, action, …).")] = "e2e",
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Match two results folders by config identity; exit 6 on a latency, energy or correctness regression."""
    from vlabench.results.compare import Settings, compare_folders, compare_table

    settings = Settings(
        threshold=threshold,
        energy_threshold=energy_threshold,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        phase=phase,
    )
    report = compare_folders(baseline, candidate, settings)
    for reason in report.skipped:
        err.print(f"[yellow]skipped[/] {reason}", highlight=False)
    if as_json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        out.print(compare_table(report))
        for title, names in (("only in baseline", report.only_baseline), ("only in candidate", report.only_candidate)):
            for name in names:
                out.print(f"[dim]{title}:[/] {name}", highlight=False)
    if report.regressions:
        err.print(f"[bold red]{len(report.regressions)} regressed run(s)[/]")
        raise typer.Exit(EXIT_CHECK_FAILED)


@app.command()
@reports_errors
def validate(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="Results folder (or one result file).")],
    min_iterations: Annotated[int, typer.Option(help="Timed inferences each result must have.")] = 10,
    min_duration: Annotated[float, typer.Option(help="Timed seconds each result must have.")] = 10.0,
    allow_dirty: Annotated[
        bool, typer.Option("--allow-dirty", help="Accept results measured from a modified working tree.")
    ] = False,
    require_measured_energy: Annotated[
        bool, typer.Option("--require-measured-energy", help="Refuse estimated energy (no sensor).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the problems as JSON.")] = False,
) -> None:
    """Check results for publication: schema, provenance, correctness gate, iterations, energy; exit 6 on a problem."""
    from vlabench.results.validate import Requirements, problems_table, validate_folder

    requirements = Requirements(
        min_iterations=min_iterations,
        min_duration_s=min_duration,
        allow_dirty=allow_dirty,
        require_measured_energy=require_measured_energy,
    )
    files, problems = validate_folder(folder, requirements)
    if not files:
        raise InputError(f"{folder}: no result files")
    if as_json:
        sys.stdout.write(json.dumps([problem.model_dump() for problem in problems], indent=2) + "\n")
    elif problems:
        out.print(problems_table(problems))
    bad = len({problem.file for problem in problems})
    (err if as_json else out).print(f"{len(files)} result files checked, {bad} with problems", highlight=False)
    if problems:
        raise typer.Exit(EXIT_CHECK_FAILED)
