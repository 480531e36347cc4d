"""Lossless action-expert fusion: work the denoising loop repeats on unchanged inputs, done once per inference.

- SmolVLA's cross-attention layers project the cached prefix K/V with the expert's own k/v weights; the result
  does not depend on the step, so it is computed once (``ExpertKV.cross``).
- Joint-attention layers concatenate [prefix K/V ; suffix K/V] every step (a copy of the whole prefix cache per
  layer and step); static buffers hold the prefix part once and each step overwrites only the suffix part.
- The buffers are allocated on the first inference and refilled in place afterwards, so their addresses stay fixed
  (what a captured CUDA graph of the denoising loop needs). Two sets alternate, so V-AEFusion can run stale steps
  on the previous cycle's buffers while the new prefix fills the other set.
- A compiled denoising step (``torch-compile``) takes only the cross layers' part (``joint_buffers=False``): writing
  the suffix into a static buffer is a mutation of a graph input there, and measured side by side it made the
  compiled step slower than no fusion at all (issue 19's notes); the compiled graph concatenates in a fused kernel
  of its own.
The arithmetic is the same as the plain path; tests check the actions are equal.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from vlabench.models.replicas import ExpertKV, FlowMatchingVLA, PrefixCache


class ExpertKVHoister:
    """Turns a prefix cache into one carrying ``ExpertKV``, reusing its static buffers across inferences."""

    SETS = 2

    def __init__(self, model: FlowMatchingVLA, suffix_tokens: int, joint_buffers: bool = True) -> None:
        self.model = model
        self.suffix_tokens = suffix_tokens
        self.joint_buffers = joint_buffers  # False: the joint layers keep concatenating (see the module's notes)
        self._sets: list[ExpertKV | None] = [None] * self.SETS
        self._next = 0

    @torch.inference_mode()
    def __call__(self, cache: PrefixCache) -> PrefixCache:
        layers = self.model.expert.layers
        cross = {
            i: layer.project_prefix(cache.keys[i], cache.values[i]) for i, layer in enumerate(layers) if layer.cross
        }
        joint = self.joint_buffers and any(not layer.cross for layer in layers)
        slot, self._next = self._next, (self._next + 1) % self.SETS
        buffers = self._sets[slot]
        if buffers is None or not self._fits(buffers, cache):
            buffers = self._sets[slot] = self._allocate(cache, cross, joint)
        for index, (k, v) in cross.items():
            buffers.cross[index][0].copy_(k)
            buffers.cross[index][1].copy_(v)
        if buffers.joint_keys is not None and buffers.joint_values is not None:
            prefix = cache.keys.shape[3]
            buffers.joint_keys[:, :, :, :prefix].copy_(cache.keys)
            buffers.joint_values[:, :, :, :prefix].copy_(cache.values)
        return replace(cache, expert_kv=buffers)

    def _fits(self, buffers: ExpertKV, cache: PrefixCache) -> bool:
        joint = buffers.joint_keys
        return joint is None or joint.shape[3] == cache.keys.shape[3] + self.suffix_tokens

    def _allocate(self, cache: PrefixCache, cross: dict, joint: bool) -> ExpertKV:
        layers, batch, heads, prefix, dim = cache.keys.shape
        shape = (layers, batch, heads, prefix + self.suffix_tokens, dim)
        keys = cache.keys.new_empty(shape) if joint else None
        values = cache.values.new_empty(shape) if joint else None
        return ExpertKV(
            cross={i: (torch.empty_like(k), torch.empty_like(v)) for i, (k, v) in cross.items()},
            joint_keys=keys,
            joint_values=values,
        )
