"""``vlabench site build`` and ``site serve``: the static CET leaderboard website."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vlabench.cli.options import Bounds, number_option, run_option
from vlabench.cli.views.console import markup_safe, stderr, stdout, warn_skipped
from vlabench.cli.views.site import BuildProgress


def build(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Result files or folders (searched recursively); none: the bundled leaderboard."),
    ] = None,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Site folder (replaced atomically).")] = Path("site"),
    priority: Annotated[str, typer.Option(help="Initial CET priority: cost, energy or time.")] = "cost",
    control_hz: Annotated[
        float, run_option("control_hz", help="Initial control-rate target, Hz (the page can change it).")
    ] = 10.0,
    execution: Annotated[
        str, typer.Option(help="Initial execution model: per-step, sync or async (the page can change it).")
    ] = "per-step",
    chunk: Annotated[
        int, number_option(Bounds(1, 10_000, integer=True), help="Actions executed per inference (sync, async).")
    ] = 1,
    projected: Annotated[
        bool | None,
        typer.Option(
            "--projected/--no-projected",
            help="Add the roofline projections (and estimated energy for published rows); default: only when "
            "building the bundled leaderboard.",
        ),
    ] = None,
) -> None:
    """Build the leaderboard (static files with relative links, no CDN) from results folders; with no folder, the
    bundled one: the results this checkout ships, the published and the projected rows."""
    from vlabench.analysis.cet import EXECUTIONS, ExecutionModel
    from vlabench.errors import InputError
    from vlabench.leaderboard_site.build import build_site

    if execution not in EXECUTIONS:
        raise InputError(f"--execution {execution!r} is not one of {', '.join(EXECUTIONS)}")
    model = ExecutionModel(mode=execution, actions_per_chunk=chunk)  # type: ignore[arg-type]
    with_projections = not paths if projected is None else projected
    with BuildProgress(stderr) as progress:
        report = build_site(paths or [], out_dir, priority, control_hz, model, with_projections, progress)  # type: ignore[arg-type]
    warn_skipped(report.skipped)
    stdout.print(
        f"site: [bold]{markup_safe(report.site)}[/] ({report.rows} leaderboard rows from {report.runs} results, "
        f"{report.pages} pages); open {report.site / 'index.html'} or run `vlabench site serve {report.site}`",
        highlight=False,
    )


def serve(
    site: Annotated[Path, typer.Argument(help="A folder written by `vlabench site build`.")],
    port: Annotated[
        int, number_option(Bounds(0, 65_535, integer=True), help="TCP port on 127.0.0.1 (0: any free port).")
    ] = 8000,
) -> None:
    """Preview a built site on http://127.0.0.1:PORT (Ctrl-C stops it)."""
    from vlabench.leaderboard_site.serve import make_server

    server = make_server(site, port)
    stdout.print(
        f"serving {markup_safe(site)} on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", highlight=False
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        stdout.print("stopped")
    finally:
        server.server_close()
