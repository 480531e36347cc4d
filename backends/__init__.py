"""Runtime adapters behind one interface (see ``base.py``)."""

from __future__ import annotations

from vlabench.backends.base import PRECISIONS, Backend, PreparedPolicy
from vlabench.backends.torch_backend import TorchBackend
from vlabench.errors import unknown_name

__all__ = ["BACKENDS", "PRECISIONS", "Backend", "PreparedPolicy", "get_backend", "parse_precision"]

BACKENDS: dict[str, type[Backend]] = {"torch": TorchBackend}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise unknown_name("backend", name, BACKENDS)
    return BACKENDS[name]()


def parse_precision(name: str) -> str:
    if name not in PRECISIONS:
        raise unknown_name("precision", name, PRECISIONS)
    return name
