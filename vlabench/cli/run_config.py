"""The ``RunConfig`` of a measuring command: its ``--config`` file overridden by the flags the command line set."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from vlabench.cli.options import given_for
from vlabench.config import RunConfig
from vlabench.errors import InputError


def build_run_config(ctx: typer.Context) -> RunConfig:
    """The ``--config`` file's settings (if any) overridden by the flags given, i.e. the command's parameters named
    like a RunConfig field that the command line set; one clear error, naming the flags, if the result is invalid."""
    config = ctx.params.get("config")
    base = load_config_file(config) if config else RunConfig()
    given = given_for(ctx, RunConfig.model_fields)
    try:
        return RunConfig.model_validate({**base.model_dump(exclude_unset=True), **given})
    except ValidationError as exc:
        flags = run_flags(ctx)
        problems = "; ".join(
            f"{flags.get(str(error['loc'][0]), error['loc'][0])}: {error['msg']}" if error["loc"] else error["msg"]
            for error in exc.errors()
        )
        raise InputError(f"invalid option: {problems}") from None


def run_flags(ctx: typer.Context) -> dict[str, str]:
    """RunConfig field → the flag that sets it, as ``vlabench run`` declares them (it has one for every field)."""
    root = ctx.find_root()
    return {param.name: param.opts[0] for param in root.command.get_command(root, "run").params if param.name}


def load_config_file(path: Path) -> RunConfig:
    """A ``--config`` file: a regular UTF-8 file (never a FIFO, a device or a binary), strict YAML, a valid config."""
    from vlabench.yaml_data import load_yaml_file

    return load_yaml_file(path, RunConfig, "run config", empty_ok=True)
