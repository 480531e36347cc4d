"""The torch-compile backend: the torch replica through ``torch.compile`` (inductor), optionally one CUDA graph."""

from vlabench.backends.torch_compile.backend import TorchCompileBackend

__all__ = ["TorchCompileBackend"]
