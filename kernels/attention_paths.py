"""The attention kernels by path name: the int8 attention on AVX2 (``int8_attention.py``) and the bf16 attention on
AMX tiles or VDPBF16PS (``amx_attention.py``), for the torch backend's int8 schemes to swap in."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from torch import nn

from vlabench.kernels.amx_attention import AmxAttention
from vlabench.kernels.amx_int8 import ATTENTION_UNITS
from vlabench.kernels.int8_attention import Int8Attention

MODULES: dict[str, Callable[[], nn.Module]] = {
    "avx2": Int8Attention,
    **{unit: partial(AmxAttention, unit) for unit in ATTENTION_UNITS},
}
"""Path name -> a new attention module on that path's kernel."""
