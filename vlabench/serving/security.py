"""Who may use a policy server: TLS (the server's certificate; optionally a client certificate every caller must
present, signed by ``--tls-ca``) and an access token (``--token-file``: callers send it as ``authorization: Bearer
…``). Without them a server bound beyond loopback serves anyone who can reach the port: ``exposure_warning`` says so.
Files are read before any work, each a clear error when missing or unreadable."""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import grpc

from vlabench.errors import InputError

TOKEN_HEADER = "authorization"
MAX_PEM_BYTES = 1 << 20
MIN_TOKEN_CHARS = 16


def read_secret(path: Path, what: str) -> bytes:
    """A small regular file (a PEM certificate or key, a token): its bytes."""
    try:
        if not path.is_file():
            raise InputError(f"{what} {path}: not a regular file")
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if not data.strip() or len(data) > MAX_PEM_BYTES:
        raise InputError(f"{what} {path}: empty, or larger than {MAX_PEM_BYTES >> 20} MiB")
    return data


def read_token(path: Path | None) -> str | None:
    if path is None:
        return None
    token = read_secret(path, "--token-file").decode("utf-8", errors="replace").strip()
    if len(token) < MIN_TOKEN_CHARS or any(not char.isprintable() or char.isspace() for char in token):
        raise InputError(f"--token-file {path}: a token is one line of at least {MIN_TOKEN_CHARS} visible characters")
    return token


@dataclass(frozen=True)
class ServerSecurity:
    credentials: grpc.ServerCredentials | None  # None: plain TCP
    token: str | None
    client_certificates: bool

    def refusal(self, context: grpc.ServicerContext) -> str | None:
        """Why a call is refused (no or a wrong token); None when it may go on."""
        if self.token is None:
            return None
        sent = dict(context.invocation_metadata()).get(TOKEN_HEADER, "")
        if not isinstance(sent, str) or not sent:
            return "this server needs an access token (run --remote … --token-file FILE)"
        if not hmac.compare_digest(sent.encode(), f"Bearer {self.token}".encode()):
            return "the access token is not this server's"
        return None


def server_security(cert: Path | None, key: Path | None, ca: Path | None, token_file: Path | None) -> ServerSecurity:
    """TLS with the server's certificate and key (and, with ``ca``, client certificates required), and a token."""
    if (cert is None) != (key is None):
        raise InputError("--tls-cert and --tls-key go together: the server's certificate and its private key")
    if ca is not None and cert is None:
        raise InputError("--tls-ca requires client certificates over TLS: give --tls-cert and --tls-key too")
    credentials = None
    if cert is not None and key is not None:
        pair = (read_secret(key, "--tls-key"), read_secret(cert, "--tls-cert"))
        roots = read_secret(ca, "--tls-ca") if ca is not None else None
        credentials = grpc.ssl_server_credentials(
            [pair], root_certificates=roots, require_client_auth=roots is not None
        )
    return ServerSecurity(credentials, read_token(token_file), ca is not None)


def channel_credentials(ca: Path | None, cert: Path | None, key: Path | None) -> grpc.ChannelCredentials | None:
    """The client's TLS: the CA the server's certificate must chain to, and its own certificate (None: plain)."""
    if (cert is None) != (key is None):
        raise InputError("--tls-cert and --tls-key go together: this client's certificate and its private key")
    if ca is None and cert is None:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=read_secret(ca, "--tls-ca") if ca is not None else None,
        private_key=read_secret(key, "--tls-key") if key is not None else None,
        certificate_chain=read_secret(cert, "--tls-cert") if cert is not None else None,
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, security: ServerSecurity) -> str | None:
    """A warning for a server reachable beyond this host without TLS or a token."""
    if is_loopback(host):
        return None
    missing = [
        name for name, absent in (("TLS", security.credentials is None), ("a token", not security.token)) if absent
    ]
    if not missing:
        return None
    return (
        f"listening on {host} beyond loopback without {' or '.join(missing)}: anyone who can reach the port can use "
        "this policy server"
        + (" and read its traffic" if security.credentials is None else "")
        + "; give --tls-cert/--tls-key and --token-file"
    )
