"""The options of serving robots (``run --robots``, ``run --remote``) and of ``vlabench serve``'s access control."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from vlabench.cli.options import Bounds, OutputOption, ServingOption, run_option

ROBOTS = Bounds.run("robots")
ACCESS = "Access (TLS, token)"


def parse_robots(value: Any) -> int | str | None:
    """``--robots``: a count within its range, or ``auto`` (the capacity search)."""
    if value is None or str(value).strip().lower() == "auto":
        return None if value is None else "auto"
    return ROBOTS.parse(value)


RobotsFlag = Annotated[
    str | None,
    ServingOption(
        parser=parse_robots,
        metavar=f"<int {ROBOTS.text.replace(' ', '')} | auto>",
        help="After timing, serve this many robots from the one policy instance through a dynamic batcher "
        "(per-robot latency, queueing, busy share; cost and energy from what was served); auto: search the most "
        "robots whose every p99 passes the control gate.",
    ),
]
MaxRobotsFlag = Annotated[
    int, run_option("max_robots", option=ServingOption, help="With --robots auto: the largest count to try.")
]
ArrivalsFlag = Annotated[
    str,
    ServingOption(
        metavar="[closed|poisson]",
        help="closed: each robot asks under its execution model; poisson: open loop, requests at random times, a "
        "period apart on average, answered or not.",
    ),
]
EncodingFlag = Annotated[
    str, ServingOption(metavar="[jpeg|png|raw]", help="With --remote: how the robots send their camera frames.")
]
JpegQualityFlag = Annotated[
    int, run_option("jpeg_quality", option=ServingOption, help="With --remote --encoding jpeg: the JPEG quality.")
]
LinkFlag = Annotated[
    str | None,
    ServingOption(
        help="With --remote: an emulated link on the way: ethernet, wifi, wifi-congested (illustrative figures), or "
        "delay=MS,jitter=MS,rate=MBIT,loss=PCT (a preset's figures can be changed the same way).",
    ),
]
ConnectTimeoutFlag = Annotated[
    float,
    run_option(
        "connect_timeout_s",
        "--connect-timeout",
        option=ServingOption,
        help="With --remote: how long to wait for the server to accept and finish starting, s.",
    ),
]


def access_option(help: str) -> Any:
    return OutputOption(help=help, rich_help_panel=ACCESS)


TlsCaFlag = Annotated[
    Path | None, ServingOption(help="With --remote: the CA the server's certificate must chain to (PEM).")
]
TlsCertFlag = Annotated[
    Path | None, ServingOption(help="With --remote: this client's certificate (PEM; with --tls-key).")
]
TlsKeyFlag = Annotated[Path | None, ServingOption(help="With --remote: this client's private key (PEM).")]
TokenFileFlag = Annotated[Path | None, ServingOption(help="With --remote: a file holding the server's access token.")]
ServeTlsCertFlag = Annotated[Path | None, access_option("The server's certificate (PEM; with --tls-key): TLS.")]
ServeTlsKeyFlag = Annotated[Path | None, access_option("The server's private key (PEM).")]
ServeTlsCaFlag = Annotated[
    Path | None, access_option("Require client certificates signed by this CA (PEM; with --tls-cert).")
]
ServeTokenFileFlag = Annotated[Path | None, access_option("A file holding the access token every caller must send.")]
