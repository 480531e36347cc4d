"""Runtime adapters behind one interface (see ``base.py``), one folder each; ``BACKENDS`` is the one list of them
(the CLI's help, provenance's libraries and the site's labels are read from it)."""

from __future__ import annotations

from vlabench.backends.base import Backend, BackendOptions, PreparedPolicy
from vlabench.backends.onnxruntime.backend import OnnxRuntimeBackend
from vlabench.backends.openvino.backend import OpenVinoBackend
from vlabench.backends.tensorrt.backend import TensorRtBackend
from vlabench.backends.torch.backend import TorchBackend
from vlabench.backends.torch_compile.backend import TorchCompileBackend
from vlabench.errors import unknown_name

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendOptions",
    "PreparedPolicy",
    "backend_class",
    "get_backend",
]

BACKENDS: dict[str, type[Backend]] = {
    "torch": TorchBackend,
    "torch-compile": TorchCompileBackend,
    "onnxruntime": OnnxRuntimeBackend,
    "openvino": OpenVinoBackend,
    "tensorrt": TensorRtBackend,
}


def backend_class(name: str) -> type[Backend]:
    if name not in BACKENDS:
        raise unknown_name("backend", name, BACKENDS)
    return BACKENDS[name]


def get_backend(name: str, options: BackendOptions | None = None) -> Backend:
    return backend_class(name).from_options(options or BackendOptions())
