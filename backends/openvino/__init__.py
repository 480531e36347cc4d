"""The OpenVINO backend: the exported graphs as IR (``ir.py``) compiled for a device target (``backend.py``),
quantized by NNCF (``quantize.py``)."""

from vlabench.backends.openvino.backend import OpenVinoBackend

__all__ = ["OpenVinoBackend"]
