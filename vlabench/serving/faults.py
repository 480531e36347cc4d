"""Why a policy server could not serve the robots, told apart: a name that does not resolve, a connection refused
(nothing listens there), a host that cannot be reached, a server that does not answer in time (still starting, or
stuck), a server shutting down, a connection that dropped mid-run (killed, crashed). Each is its own error class
with its own exit code (``vlabench.errors``); the address is checked before any of it."""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
import time

import grpc

from vlabench.errors import (
    InputError,
    NameNotResolvedError,
    ServerLostError,
    ServerRefusedError,
    ServerShuttingDownError,
    ServerTimeoutError,
    ServerUnreachableError,
    UnavailableError,
    VlabenchError,
)
from vlabench.serving.server import SHUTTING_DOWN, STARTING

HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")
UNREACHABLE = {
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.EHOSTDOWN,
    errno.ENETDOWN,
    errno.EADDRNOTAVAIL,
    errno.EAFNOSUPPORT,  # an IPv6 address on a host without IPv6
}
RETRY_S = 0.2


class RemoteError(Exception):
    """A request the policy server did not answer; ``fault`` is the error the run ends with."""

    def __init__(self, fault: VlabenchError) -> None:
        super().__init__(str(fault))
        self.fault = fault


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (a host name, an IPv4 address, or ``[IPv6]``) as (host, port)."""
    host, _, port = address.rpartition(":")
    usage = f"--remote {address}: expected HOST:PORT of a `vlabench serve`, e.g. 127.0.0.1:50051"
    if not port.isdigit() or not 0 < int(port) < 65_536:
        raise InputError(usage)
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise InputError(f"{usage} ({host} is not an IPv6 address)") from None
        return host[1:-1], int(port)
    if len(host) > 253 or not HOSTNAME.fullmatch(host):
        raise InputError(f"{usage} ({host!r} is not a host name or an address)")
    return host, int(port)


def target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def wait_accepting(host: str, port: int, deadline: float) -> None:
    """Until ``deadline`` (monotonic s): the address accepts TCP connections; a refused connection is retried (a
    server may be binding), an unresolved name or an unreachable host is not."""
    where = target(host, port)
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NameNotResolvedError(f"--remote {where}: the name {host} does not resolve ({exc.strerror})") from None
    while True:
        for family, kind, proto, _, sockaddr in addresses:
            try:
                with socket.socket(family, kind, proto) as probe:
                    probe.settimeout(max(0.05, deadline - time.monotonic()))
                    probe.connect(sockaddr)
                return
            except ConnectionRefusedError:
                continue
            except TimeoutError:
                raise ServerUnreachableError(
                    f"--remote {where}: the host did not answer a connection within the --connect-timeout"
                ) from None
            except OSError as exc:
                if exc.errno in UNREACHABLE:
                    raise ServerUnreachableError(
                        f"--remote {where}: the host cannot be reached ({exc.strerror}): check the address and the "
                        "route to it"
                    ) from None
                raise UnavailableError(f"--remote {where}: cannot connect ({exc.strerror})") from None
        if time.monotonic() + RETRY_S >= deadline:
            raise ServerRefusedError(
                f"--remote {where}: connection refused (nothing listens on port {port} there): is `vlabench serve` "
                "running, on that port, and bound to an address this host reaches?"
            )
        time.sleep(RETRY_S)


def rpc_fault(error: grpc.RpcError, timeout_s: float, where: str) -> VlabenchError:
    """What a failed call means for the run."""
    code = error.code() if hasattr(error, "code") else None
    detail = (error.details() if hasattr(error, "details") else None) or str(error)
    if code == grpc.StatusCode.UNAVAILABLE and SHUTTING_DOWN in detail:
        return ServerShuttingDownError(f"the policy server at {where} is shutting down")
    if code == grpc.StatusCode.UNAVAILABLE and STARTING in detail:
        return ServerTimeoutError(f"the policy server at {where} is still starting")
    if code == grpc.StatusCode.UNAVAILABLE and "handshake" in detail.lower():
        return UnavailableError(f"the TLS handshake with {where} failed ({detail}): check --tls-ca/--tls-cert")
    if code == grpc.StatusCode.UNAVAILABLE:
        return ServerLostError(f"the connection to the policy server at {where} dropped (killed, crashed?): {detail}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ServerTimeoutError(f"no reply from {where} within {timeout_s:g} s (the server is too slow or stuck)")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return InputError(f"the policy server at {where} refused the call: {detail}")
    name = code.name if code is not None else "an error"
    return UnavailableError(f"the policy server at {where} answered {name}: {detail}")
