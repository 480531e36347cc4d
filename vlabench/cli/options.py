"""Option types shared by the commands that build a RunConfig (run, profile, loop); None means "not given".

A command's parameters are named like the fields of the settings they fill (RunConfig, compare's Settings, …), so the
settings are built from ``ctx.params`` by field name, never by retyping each parameter."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

ModelFlag = Annotated[str | None, typer.Option(help="Model name (see `vlabench models`). [default: smolvla]")]
DeviceFlag = Annotated[
    str | None, typer.Option(help="Device profile or alias: auto, cpu, cuda, jetson, … [default: auto]")
]
OneBackendFlag = Annotated[str | None, typer.Option(help="One backend. [default: torch]")]
EpFlag = Annotated[str | None, typer.Option(help="onnxruntime execution provider: cpu, cuda, tensorrt, …")]
DeviceTargetFlag = Annotated[str | None, typer.Option(help="OpenVINO device: CPU, GPU, NPU, AUTO. [default: CPU]")]
PrecisionFlag = Annotated[str | None, typer.Option(help="fp32, bf16 or fp16. [default: fp32 on CPU, bf16 on CUDA]")]
CamerasFlag = Annotated[int | None, typer.Option(help="Camera count. [default: the model's]")]
StepsFlag = Annotated[int | None, typer.Option(help="Denoising steps. [default: the model's]")]
ChunkFlag = Annotated[int | None, typer.Option(help="Action chunk length. [default: the model's]")]
SeedFlag = Annotated[int | None, typer.Option(help="Seed for weights, observations and noise. [default: 0]")]
ThreadsFlag = Annotated[int | None, typer.Option(help="torch intra-op threads. [default: torch's]")]
OutFlag = Annotated[Path | None, typer.Option(help="Results folder. [default: results]")]
DpCacheFlag = Annotated[
    str | None,
    typer.Option(help="DP-Cache: computed steps {0,1,2,6,8,9}, segment:A-B/S, or a `calibrate dp-cache` file."),
]
FuseExpertKvFlag = Annotated[
    bool | None,
    typer.Option("--fuse-expert-kv", help="torch: compute the expert's prefix K/V work once per inference."),
]

# What one run measures, in the order `profile` and `loop` list them first.
TARGET_OPTIONS: dict[str, Any] = {
    "model": ModelFlag,
    "device": DeviceFlag,
    "backend": OneBackendFlag,
    "ep": EpFlag,
    "device_target": DeviceTargetFlag,
    "precision": PrecisionFlag,
    "cameras": CamerasFlag,
    "steps": StepsFlag,
}

Command = TypeVar("Command", bound=Callable[..., Any])


def with_target_options(command: Command) -> Command:
    """Declare TARGET_OPTIONS between the command's context and its own options (typer reads the signature); the
    command takes them as ``**target`` and finds them, like every flag, in ``ctx.params``."""
    signature = inspect.signature(command, eval_str=True)
    context, *own = (p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD)
    target = [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=annotation)
        for name, annotation in TARGET_OPTIONS.items()
    ]
    command.__signature__ = signature.replace(parameters=[context, *target, *own])  # type: ignore[attr-defined]
    return command


def arguments_for(ctx: typer.Context, fields: Collection[str]) -> dict[str, Any]:
    """The command's arguments whose parameter is named like one of ``fields``."""
    return {name: value for name, value in ctx.params.items() if name in fields}
