"""The onnxruntime backend: the exported graphs (``backends/onnx_export.py``) on an execution provider
(``backend.py``), quantized by onnxruntime's own tools (``quantize.py``)."""

from vlabench.backends.onnxruntime.backend import OnnxRuntimeBackend

__all__ = ["OnnxRuntimeBackend"]
