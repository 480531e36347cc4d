"""The ``vlabench`` typer app: the commands of every group registered in the order ``--help`` lists them, each
wrapped so that vlabench errors end as one red line and the documented exit code."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Annotated, Any

import typer
from rich.text import Text

import vlabench
from vlabench.cli.analysis import calibrate_dp_cache, fidelity, project, roofline
from vlabench.cli.catalog import devices, models, rank
from vlabench.cli.fleet import compare, sweep, validate, worker
from vlabench.cli.measure import loop, profile, run
from vlabench.cli.serve import serve_policy
from vlabench.cli.site import build, serve
from vlabench.cli.views.console import safe, stderr, stdout
from vlabench.errors import InterruptError, VlabenchError

app = typer.Typer(
    help="The ``vlabench`` command line.", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False
)


def reports_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn vlabench errors into one red line and the documented exit code, never a traceback."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except VlabenchError as exc:
            if str(exc):  # the message holds names, paths and values as typed: text, never markup
                # never broken by Rich: the terminal wraps it, so paths and names in it stay copyable
                stderr.print(Text.assemble(("error:", "bold red"), " ", safe(exc)), highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            stderr.print("[bold red]interrupted[/]: no result was written")
            raise typer.Exit(InterruptError.exit_code) from None

    return wrapper


def version_callback(value: bool) -> None:
    if value:
        stdout.print(f"vlabench {vlabench.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Benchmark Vision-Language-Action policies phase by phase: latency, control rate, memory."""


def group(name: str, summary: str, commands: dict[str, Callable[..., Any]]) -> None:
    """A subcommand group of ``vlabench``: ``vlabench NAME COMMAND``."""
    sub = typer.Typer(help=summary, no_args_is_help=True)
    for command_name, command in commands.items():
        sub.command(command_name)(reports_errors(command))
    app.add_typer(sub, name=name)


for command in (
    run,
    models,
    devices,
    rank,
    profile,
    roofline,
    project,
    loop,
    fidelity,
    sweep,
    worker,
    compare,
    validate,
):
    app.command()(reports_errors(command))
app.command("serve")(reports_errors(serve_policy))
group("calibrate", "Offline calibrations.", {"dp-cache": calibrate_dp_cache})
group("site", "The static CET leaderboard website.", {"build": build, "serve": serve})
