"""``vlabench serve``: a policy server for robots elsewhere (``vlabench run --remote HOST:PORT``)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from vlabench.cli.options import (
    ENERGY_METER_HELP,
    RUN_DEFAULTS,
    BatchFlag,
    Bounds,
    MaxWaitFlag,
    OutputOption,
    SeedFlag,
    ThreadsFlag,
    TimingOption,
    WarmupFlag,
    number_option,
    run_option,
    with_target_options,
)
from vlabench.cli.run_config import build_run_config
from vlabench.cli.serving_options import ServeTlsCaFlag, ServeTlsCertFlag, ServeTlsKeyFlag, ServeTokenFileFlag
from vlabench.cli.views.console import markup_safe, stderr, stdout
from vlabench.commands.run import Saved
from vlabench.config import RunConfig
from vlabench.errors import InterruptError, VlabenchError
from vlabench.results.schema import RunResult


@with_target_options
def serve_policy(
    ctx: typer.Context,
    batch: BatchFlag = RUN_DEFAULTS.batch,
    max_wait_ms: MaxWaitFlag = RUN_DEFAULTS.max_wait_ms,
    host: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0: every interface; give TLS and a token then).")
    ] = "127.0.0.1",
    port: Annotated[
        int, number_option(Bounds(0, 65_535, integer=True), help="TCP port (0: any free port, printed).")
    ] = 50051,
    seed: SeedFlag = RUN_DEFAULTS.seed,
    threads: ThreadsFlag = None,
    warmup: WarmupFlag = RUN_DEFAULTS.warmup,
    min_iterations: Annotated[
        int | None, run_option("min_iterations", option=TimingOption, help="Timed inferences of the baseline pass.")
    ] = None,
    min_duration_s: Annotated[
        float, run_option("min_duration_s", "--min-duration", option=TimingOption, help="Baseline pass, s.")
    ] = RUN_DEFAULTS.min_duration_s,
    energy_meter: Annotated[str, typer.Option(help=ENERGY_METER_HELP)] = RUN_DEFAULTS.energy_meter,
    tls_cert: ServeTlsCertFlag = None,
    tls_key: ServeTlsKeyFlag = None,
    tls_ca: ServeTlsCaFlag = None,
    token_file: ServeTokenFileFlag = None,
    config: Annotated[
        Path | None, OutputOption(help="YAML file with any of `vlabench run`'s settings; flags override it.")
    ] = None,
    **target: object,
) -> None:
    """Serve one policy to robots over gRPC: first a baseline pass like `vlabench run` on this host (its phases,
    energy and cost), then batches of robots' requests until Ctrl-C or SIGTERM."""
    from vlabench.serving.security import exposure_warning, server_security
    from vlabench.serving.server import start_server

    run_config = build_run_config(ctx)
    security = server_security(tls_cert, tls_key, tls_ca, token_file)
    warning = exposure_warning(host, security)
    if warning:
        stderr.print(f"[bold yellow]warning:[/] {markup_safe(warning)}", highlight=False, soft_wrap=True)

    def listening(address: str) -> None:
        stdout.print(
            f"listening on {address}; preparing {markup_safe(run_config.model)} and timing its baseline pass …",
            highlight=False,
            soft_wrap=True,
        )
        stdout.file.flush()

    def inform(text: str) -> None:
        stdout.print(markup_safe(text), highlight=False, soft_wrap=True)
        stdout.file.flush()

    server = start_server(run_config, host, port, security, listening, inform)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    baseline = server.baseline

    def ready(address: str) -> None:
        stdout.print(
            f"serving {markup_safe(baseline.model.name)} ({baseline.backend} {baseline.precision} on "
            f"{markup_safe(baseline.device.profile)}; batches of at most {baseline.workload.batch} within "
            f"{run_config.max_wait_ms:g} ms) on {address} (Ctrl-C stops)",
            highlight=False,
            soft_wrap=True,
        )
        stdout.file.flush()

    try:
        server.run(ready)
    except KeyboardInterrupt:
        server.shutdown()
    stdout.print("stopped: the requests in flight were told the server is shutting down")


def run_remote_robots(config: RunConfig, as_json: bool) -> tuple[Saved, VlabenchError | None]:
    """``run --remote``: the robots here, the policy on the server; the result saved and shown like a run's. Returns
    where it was saved (the caller reports a result that could not be written) and, for a partial result, the fault
    that cut the window short (its message says the partial result was kept)."""
    from vlabench.cli.views.console import notes, write_json
    from vlabench.cli.views.run import result_tables
    from vlabench.commands.run import check_paths, save_result
    from vlabench.serving.client import run_remote

    check_paths(config)
    info = notes(as_json)
    result, fault = run_remote(config, lambda text: info.print(markup_safe(text), highlight=False))
    saved = save_result(result, config.out)
    if as_json:
        write_json(result.model_dump_json(indent=2))
    else:
        for renderable in result_tables(result):
            stdout.print(renderable)
    if saved.problem is None:
        info.print(f"result: [bold]{markup_safe(saved.path)}[/]", soft_wrap=True)
    return saved, None if fault is None else type(fault)(f"{fault}; {kept(result)}")


def kept(result: RunResult) -> str:
    served = result.serving
    count = served.requests if served else 0
    return f"a partial result with the {count} requests served was written"


def partial_error(result: RunResult) -> VlabenchError:
    """The error a run whose serving window ended early ends with, once its partial result is written."""
    reason = result.partial_reason or "stopped early"
    if "interrupted" in reason:
        return InterruptError(f"{reason}; {kept(result)}")
    return VlabenchError(f"the served robots failed ({reason}); {kept(result)}")
