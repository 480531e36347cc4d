"""GR00T N1.6's replica: its public config's shapes, its post-norm VL features and its alternating cross-attention."""

from __future__ import annotations

import pytest
import torch

from vlabench.models.replicas import build_replica, count_parameters
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation

CPU = torch.device("cpu")


def test_the_full_model_has_n16s_published_shapes_and_size_class():
    n15, n16 = load_model_spec("gr00t-n1.5"), load_model_spec("gr00t-n1.6")
    assert (n16.llm.layers, n16.dit.layers, n16.adapter) == (16, 32, None)  # select_layer 16, 32 DiT layers, no VL-SA
    assert n16.dit.layers == 2 * n15.dit.layers  # "its action head has twice N1.5's layers"
    assert (n16.action.chunk, n16.action.action_dim, n16.head.future_tokens) == (50, 128, 0)
    params = count_parameters(n16)
    assert params == pytest.approx(n16.reference.params, rel=n16.reference.tolerance)
    assert params > count_parameters(n15)
    workload = Workload.from_spec(n16)
    assert workload.suffix_tokens == 1 + 50  # [state ; actions], no future tokens


def test_the_tiny_replica_alternates_text_and_image_cross_attention_over_post_norm_features():
    spec = load_model_spec("gr00t-n1.6-tiny")
    workload = Workload.from_spec(spec)
    model = build_replica(spec, 0, torch.float32, CPU)
    obs = synthetic_observation(spec, workload, 0, torch.float32, CPU)
    cache = model.prefix(obs)
    images = workload.cameras * spec.tokens_per_camera
    assert cache.image[:, :images].all() and not cache.image[:, images:].any()
    biases = model.cross_biases(cache, workload.suffix_tokens, torch.float32)
    assert len(biases) == spec.dit.layers
    text, image = biases[0], biases[2]  # blocks 0, 4, … see the text; 2, 6, … the images (odd blocks self-attend)
    assert (text[..., :images] < -1e30).all() and (image[..., :images] == 0).all()
    assert (image[..., images:] < -1e30).all()
    # the features are read after the LLM's final norm: the same weights read before it give other features
    pre = spec.model_copy(update={"head": spec.head.model_copy(update={"vl_features": "pre-norm"})})
    other = build_replica(pre, 0, torch.float32, CPU).prefix(obs)
    assert cache.features.shape == other.features.shape == (1, workload.prefix_tokens, spec.llm.hidden)
    assert not torch.allclose(cache.features, other.features)
    velocity = model.denoise_step(initial_noise(workload, 0, torch.float32, CPU), torch.ones(1), cache)
    assert velocity.shape == (1, workload.chunk, workload.action_dim) and torch.isfinite(velocity).all()
    # N1.5's structure is unchanged: every cross block sees all valid tokens, and its future tokens are kept
    n15 = build_replica(load_model_spec("gr00t-n1.5-tiny"), 0, torch.float32, CPU)
    assert n15.future_tokens is not None and not isinstance(n15.cross_biases(cache, 5, torch.float32), list)
