"""The TensorRT backend: one engine per exported graph on a CUDA device (``backend.py``)."""

from vlabench.backends.tensorrt.backend import TensorRtBackend

__all__ = ["TensorRtBackend"]
