"""The torch backend: eager PyTorch, the correctness reference (``backend.py``), its quantizers (``quantize.py``,
``quant_layers.py``)."""

from vlabench.backends.torch.backend import TorchBackend

__all__ = ["TorchBackend"]
