"""Greedy decoding of action tokens (OpenVLA, π0-FAST); each family maps its tokens back to an action chunk
(``actions_from_tokens``, rules in ``models/token_rules.py``)."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor

from vlabench.models.specs import ModelSpec


class GreedyDecoder:
    """The action loop of token-decoding policies: the first token comes from the prefill's logits, each step
    decodes one more through ``policy.decode_step`` and writes its K/V into the cache's static buffers."""

    def __init__(self, spec: ModelSpec, steps: int) -> None:
        if spec.action_loop != "greedy_decode":
            raise TypeError(f"{spec.name} does not decode tokens")
        self.spec = spec
        self.steps = steps
        self.schedule = None
        self.computed = frozenset(range(steps))
        self.first_id = spec.first_action_token

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
        return self.spec.actions_from_tokens(tokens, x_t.shape[1]).to(x_t.dtype), None
