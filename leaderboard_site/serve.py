"""``vlabench site serve``: preview a built site over HTTP on 127.0.0.1."""

from __future__ import annotations

from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from vlabench.errors import InputError, UnavailableError

from .build import MARKER, is_site


def make_server(site: Path, port: int = 8000) -> ThreadingHTTPServer:
    """An HTTP server for ``site`` on 127.0.0.1 (port 0 picks a free one); refuses a folder that is not a site."""
    if not site.is_dir() or not is_site(site):
        raise InputError(f"{site} is not a built vlabench site (no index.html and {MARKER}); run `vlabench site build`")
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port} is not a TCP port (0-65535)")
    handler = partial(SimpleHTTPRequestHandler, directory=str(site))
    try:
        return ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise UnavailableError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
