"""Greedy decoding of action tokens (OpenVLA, π0-FAST) and the maps from tokens back to an action chunk."""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import Tensor

from vlabench.models.specs import ModelSpec, OpenVLASpec, Pi0FastSpec

FAST_SCALE = 10.0  # FAST rounds scale × DCT coefficients to integers (openpi / lerobot FAST tokenizer default)


def dct_matrix(size: int) -> Tensor:
    """Orthonormal DCT-II matrix: coefficients = M @ signal, signal = M.T @ coefficients."""
    n = torch.arange(size, dtype=torch.float64)
    matrix = torch.cos(math.pi / size * (n[None, :] + 0.5) * n[:, None]) * math.sqrt(2 / size)
    matrix[0] /= math.sqrt(2)
    return matrix.float()


def bin_actions(indices: Tensor, spec: OpenVLASpec) -> Tensor:
    """OpenVLA: token k of the last ``bins`` ids is the k-th of ``bins`` uniform values in [-1, 1]."""
    values = torch.linspace(-1, 1, spec.action.bins, device=indices.device)[indices]
    return values.reshape(indices.shape[0], spec.action.chunk, spec.action.action_dim)


def fast_actions(indices: Tensor, spec: Pi0FastSpec, chunk: int) -> Tensor:
    """π0-FAST stand-in for the tokenizer's decode: each token is one quantized DCT coefficient (the BPE merge
    table is a hub asset we cannot ship), filled in frequency-major order, then inverted along time."""
    batch, count = indices.shape
    dims = spec.action.action_dim
    coefficients = torch.zeros(batch, chunk * dims, device=indices.device)
    used = min(count, chunk * dims)
    coefficients[:, :used] = (indices[:, :used].float() - spec.action.fast_vocab / 2) / FAST_SCALE
    return dct_matrix(chunk).to(indices.device).t() @ coefficients.reshape(batch, chunk, dims)


class GreedyDecoder:
    """The action loop of token-decoding policies: the first token comes from the prefill's logits, each step
    decodes one more through ``policy.decode_step`` and writes its K/V into the cache's static buffers."""

    def __init__(self, spec: ModelSpec, steps: int) -> None:
        if not isinstance(spec, OpenVLASpec | Pi0FastSpec):
            raise TypeError(f"{spec.name} does not decode tokens")
        self.spec = spec
        self.steps = steps
        self.schedule = None
        self.computed = frozenset(range(steps))
        vocab = spec.llm.vocab
        if isinstance(spec, OpenVLASpec):
            self.first_id = vocab - spec.action.bins
        else:
            self.first_id = vocab - spec.action.skip_tokens - spec.action.fast_vocab

    def sample(self, policy, cache, noise: Tensor, step_span=None, steps: range | None = None, velocity=None) -> Tensor:
        return self.sample_partial(policy, cache, noise, step_span, steps, velocity)[0]

    def sample_partial(
        self, policy, cache, x_t: Tensor, step_span=None, steps: range | None = None, velocity=None
    ) -> tuple[Tensor, None]:
        prompt = cache.valid.shape[1] - self.steps
        index = cache.logits.argmax(-1)
        chosen = [index]
        for step in steps if steps is not None else range(self.steps):
            with step_span(step) if step_span else nullcontext():
                logits, keys, values = policy.decode_step((index + self.first_id)[:, None], cache)
            with torch.inference_mode():
                cache.keys[:, :, :, prompt + step] = keys[:, :, :, 0].to(cache.keys.dtype)
                cache.values[:, :, :, prompt + step] = values[:, :, :, 0].to(cache.values.dtype)
                cache.valid[:, prompt + step] = True
            index = logits.argmax(-1)
            chosen.append(index)
        tokens = torch.stack(chosen, 1)
        if isinstance(self.spec, OpenVLASpec):
            actions = bin_actions(tokens, self.spec)
        else:
            actions = fast_actions(tokens, self.spec, x_t.shape[1])
        return actions.to(x_t.dtype), None
