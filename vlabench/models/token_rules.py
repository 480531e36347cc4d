"""The token-decoding families' rule from decoded action tokens back to an action chunk (OpenVLA's bins, π0-FAST's
DCT coefficients); each family's spec class calls its own (``actions_from_tokens``)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

FAST_SCALE = 10.0  # FAST rounds scale × DCT coefficients to integers (openpi / lerobot FAST tokenizer default)


def dct_matrix(size: int) -> Tensor:
    """Orthonormal DCT-II matrix: coefficients = M @ signal, signal = M.T @ coefficients."""
    n = torch.arange(size, dtype=torch.float64)
    matrix = torch.cos(math.pi / size * (n[None, :] + 0.5) * n[:, None]) * math.sqrt(2 / size)
    matrix[0] /= math.sqrt(2)
    return matrix.float()


def bin_actions(indices: Tensor, bins: int, chunk: int, action_dim: int) -> Tensor:
    """OpenVLA: token k of the last ``bins`` ids is the k-th of ``bins`` uniform values in [-1, 1]."""
    values = torch.linspace(-1, 1, bins, device=indices.device)[indices]
    return values.reshape(indices.shape[0], chunk, action_dim)


def fast_actions(indices: Tensor, fast_vocab: int, chunk: int, dims: int) -> Tensor:
    """π0-FAST stand-in for the tokenizer's decode: each token is one quantized DCT coefficient (the BPE merge
    table is a hub asset we cannot ship), filled in frequency-major order, then inverted along time."""
    batch, count = indices.shape
    coefficients = torch.zeros(batch, chunk * dims, device=indices.device)
    used = min(count, chunk * dims)
    coefficients[:, :used] = (indices[:, :used].float() - fast_vocab / 2) / FAST_SCALE
    return dct_matrix(chunk).to(indices.device).t() @ coefficients.reshape(batch, chunk, dims)
