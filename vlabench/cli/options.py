"""Option types shared by the commands that build a RunConfig (run, profile, loop), the help panels they are listed
in, and the help text of a default that depends on the model, device or host.

A command's parameters are named like the fields of the settings they fill (RunConfig, compare's Settings, …), so the
settings are built from ``ctx.params`` by field name, never by retyping each parameter. An option whose default is a
value takes RunConfig's own default (``--help`` prints it); one whose default depends on the model, device or host
defaults to None and says so with :func:`contextual`."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from vlabench.backends import BACKENDS
from vlabench.config import LIMITS, OPEN_BELOW, RunConfig, describe_range
from vlabench.telemetry.energy.select import meter_choices

RUN_DEFAULTS = RunConfig()

# The help panels of `vlabench run`, in the order it lists them; profile and loop reuse them.
TARGET, WORKLOAD, SERVING, TIMING, ENERGY, OPTIMIZATIONS, OUTPUT = (
    "Model and target",
    "Workload",
    "Serving several robots",
    "Timing",
    "Energy and cost",
    "Optimizations",
    "Output",
)
TargetOption, WorkloadOption, ServingOption, TimingOption, EnergyOption, OptimizationOption, OutputOption = (
    partial(typer.Option, rich_help_panel=panel)
    for panel in (TARGET, WORKLOAD, SERVING, TIMING, ENERGY, OPTIMIZATIONS, OUTPUT)
)


def contextual(help: str, default: str) -> str:
    r"""``help`` ending in ``[default: …]`` for an option whose default is not one value (the model's, the host's);
    the bracket is escaped (``\[``) so that Rich prints it instead of taking it for markup."""
    return rf"{help} \[default: {default}]"


@dataclass(frozen=True)
class Bounds:
    """The range of a numeric option, checked when the command line is parsed (before any work): a value outside it,
    nan, ±inf or a non-number is a usage error naming the flag (exit 2). Its ``metavar`` shows the range in --help.

    RunConfig's options take their bounds from :data:`vlabench.config.LIMITS` (:meth:`run`), so a flag and a YAML
    config file accept exactly the same values."""

    low: float
    high: float
    open_below: bool = False
    integer: bool = False
    open_above: bool = False

    @classmethod
    def run(cls, field: str) -> Bounds:
        low, high = LIMITS[field]
        return cls(low, high, field in OPEN_BELOW, integer=isinstance(high, int))

    @property
    def text(self) -> str:
        return describe_range(self.low, self.high, self.open_below, self.open_above)

    @property
    def metavar(self) -> str:
        return f"<{'int' if self.integer else 'float'} {self.text.replace(' ', '')}>"

    def parse(self, value: Any) -> Any:
        """``value`` (a command-line string, or the option's default) as a number within the bounds."""
        if value is None:
            return None
        text = str(value).strip()
        try:
            number = int(text) if self.integer else float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not {'an integer' if self.integer else 'a number'}") from None
        if not math.isfinite(number):
            raise typer.BadParameter(f"{text} is not a finite number; use {self.text}")
        below = number <= self.low if self.open_below else number < self.low
        above = number >= self.high if self.open_above else number > self.high
        if below or above:
            raise typer.BadParameter(f"{text} is out of range; use {self.text}")
        return number


def number_option(bounds: Bounds, *decls: str, option: Callable[..., Any] = typer.Option, **kwargs: Any) -> Any:
    """A typer option (``option``: typer.Option or a panel's) whose value is parsed and range-checked by ``bounds``."""
    return option(*decls, parser=bounds.parse, metavar=bounds.metavar, **kwargs)


def run_option(field: str, *decls: str, option: Callable[..., Any] = typer.Option, **kwargs: Any) -> Any:
    """The option of RunConfig's numeric ``field``, within the range RunConfig accepts."""
    return number_option(Bounds.run(field), *decls, option=option, **kwargs)


ModelFlag = Annotated[str, TargetOption("--model", "-m", help="Model name (see `vlabench models`).")]
DeviceFlag = Annotated[str, TargetOption("--device", "-d", help="Device profile or alias: auto, cpu, cuda, jetson, …")]
OneBackendFlag = Annotated[str, TargetOption("--backend", "-b", help=f"One backend: {', '.join(BACKENDS)}.")]
BackendsFlag = Annotated[str, TargetOption("--backend", "-b", help=f"{', '.join(BACKENDS)}; a comma list; or all.")]
ENERGY_METER_HELP = f"{', '.join(meter_choices()[:-1])} or {meter_choices()[-1]}."
"""``--energy-meter``'s choices, from the meter registry (``telemetry/energy/select.py``)."""
EpFlag = Annotated[str | None, TargetOption(help="onnxruntime execution provider: cpu, cuda, tensorrt, …")]
DeviceTargetFlag = Annotated[str | None, TargetOption(help=contextual("OpenVINO device: CPU, GPU, NPU, AUTO.", "CPU"))]
QuantSchemeFlag = Annotated[
    str | None,
    TargetOption(
        help=contextual(
            "How int8 is quantized, per backend: "
            + "; ".join(f"{name} {', '.join(b.int8_schemes)}" for name, b in BACKENDS.items() if b.int8_schemes)
            + ".",
            "each backend's first",
        )
    ),
]
PrecisionFlag = Annotated[
    str | None,
    TargetOption(
        help=contextual(
            "fp32, bf16, fp16, int8, fp8, int4 or auto.",
            "fp32 on CPU, bf16 on CUDA",
        )
    ),
]
CamerasFlag = Annotated[
    int | None, run_option("cameras", option=WorkloadOption, help=contextual("Camera count.", "the model's"))
]
StepsFlag = Annotated[
    int | None, run_option("steps", option=WorkloadOption, help=contextual("Denoising steps.", "the model's"))
]
ChunkFlag = Annotated[
    int | None, run_option("chunk", option=WorkloadOption, help=contextual("Action chunk length.", "the model's"))
]
BatchFlag = Annotated[
    int,
    run_option(
        "batch",
        option=WorkloadOption,
        help="Observations per inference, one per robot (with --robots: the largest batch the server forms).",
    ),
]
MaxWaitFlag = Annotated[
    float,
    run_option(
        "max_wait_ms",
        "--max-wait-ms",
        option=ServingOption,
        help="Longest wait to fill a batch, after its oldest request, ms.",
    ),
]
RemoteFlag = Annotated[
    str | None,
    ServingOption(
        help="HOST:PORT of a `vlabench serve` policy server: the --robots run here and send their observations "
        "there (the result splits encoding, network, queueing and inference).",
    ),
]
RequestTimeoutFlag = Annotated[
    float,
    run_option(
        "request_timeout_s",
        "--request-timeout",
        option=ServingOption,
        help="With --remote: a robot gives up on a request unanswered for this long, s.",
    ),
]
ServeDurationFlag = Annotated[
    float,
    run_option("serve_duration_s", "--serve-duration", option=ServingOption, help="How long the robots are served, s."),
]
ExecutionFlag = Annotated[
    str,
    TimingOption(
        metavar="[per-step|sync|async]",
        help="How the robot executes actions: per-step (one inference per control step, the paper's gate), or "
        "chunked: sync (the robot waits for each inference) or async (the next inference runs during the chunk).",
    ),
]
ActionsPerChunkFlag = Annotated[
    int | None,
    run_option(
        "actions_per_chunk",
        option=TimingOption,
        help=contextual(
            "Actions executed per chunk with --execution sync or async (at most the chunk).", "the model's"
        ),
    ),
]
SeedFlag = Annotated[int, run_option("seed", option=WorkloadOption, help="Seed for weights, observations and noise.")]
ThreadsFlag = Annotated[
    int | None, run_option("threads", option=TimingOption, help=contextual("torch intra-op threads.", "torch's"))
]
WarmupFlag = Annotated[int, run_option("warmup", option=TimingOption, help="Warm-up inferences.")]
OutFlag = Annotated[Path, OutputOption("--out", "-o", help="Results folder.")]
DpCacheFlag = Annotated[
    str | None,
    OptimizationOption(help="DP-Cache: computed steps {0,1,2,6,8,9}, segment:A-B/S, or a `calibrate dp-cache` file."),
]
FuseExpertKvFlag = Annotated[
    bool,
    OptimizationOption(
        "--fuse-expert-kv",
        help=f"{', '.join(name for name, b in BACKENDS.items() if b.fuses_expert_kv)}: compute the expert's prefix "
        "K/V work once per inference.",
    ),
]
FuseDenoiseLoopFlag = Annotated[
    bool,
    OptimizationOption(
        "--fuse-denoise-loop",
        help=f"{', '.join(n for n, b in BACKENDS.items() if b.captures_graphs)} on CUDA: replay the whole denoise "
        "loop as a CUDA graph.",
    ),
]

# What one run measures, in the order `profile` and `loop` list them first.
TARGET_OPTIONS: dict[str, Any] = {
    "model": ModelFlag,
    "device": DeviceFlag,
    "backend": OneBackendFlag,
    "ep": EpFlag,
    "device_target": DeviceTargetFlag,
    "precision": PrecisionFlag,
    "quant_scheme": QuantSchemeFlag,
    "cameras": CamerasFlag,
    "steps": StepsFlag,
}

Command = TypeVar("Command", bound=Callable[..., Any])


def with_target_options(command: Command) -> Command:
    """Declare TARGET_OPTIONS, with RunConfig's defaults, between the command's context and its own options (typer
    reads the signature); the command takes them as ``**target`` and finds them, like every flag, in ``ctx.params``."""
    signature = inspect.signature(command, eval_str=True)
    context, *own = (p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD)
    target = [
        inspect.Parameter(
            name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=getattr(RUN_DEFAULTS, name), annotation=annotation
        )
        for name, annotation in TARGET_OPTIONS.items()
    ]
    command.__signature__ = signature.replace(parameters=[context, *target, *own])  # type: ignore[attr-defined]
    return command


def arguments_for(ctx: typer.Context, fields: Collection[str]) -> dict[str, Any]:
    """The command's arguments whose parameter is named like one of ``fields``."""
    return {name: value for name, value in ctx.params.items() if name in fields}


def given_for(ctx: typer.Context, fields: Collection[str]) -> dict[str, Any]:
    """The arguments named like one of ``fields`` that the command line set, not their defaults."""
    return {name: value for name, value in arguments_for(ctx, fields).items() if given(ctx, name)}


def given(ctx: typer.Context, name: str) -> bool:
    # By the source's name: typer may bring its own copy of click, and with it its own ParameterSource.
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"
