"""Every family's prefix cache concatenates along its batch axis (DP-Cache calibration and fidelity batch caches)."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from vlabench.models.replicas import Observation, build_replica
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, synthetic_observation

TINY_FAMILIES = [
    "smolvla-tiny",
    "pi0-tiny",
    "gr00t-n1.5-tiny",
    "openvla-7b-tiny",
    "act-tiny",
    "diffusion-policy-tiny",
]


@pytest.mark.parametrize("name", TINY_FAMILIES)
def test_concatenated_caches_equal_the_prefix_of_the_batched_observations(name):
    spec = load_model_spec(name)
    workload = Workload.from_spec(spec)
    cpu = torch.device("cpu")
    model = build_replica(spec, 0, torch.float32, cpu)
    with torch.inference_mode():
        observations = [synthetic_observation(spec, workload, seed, torch.float32, cpu) for seed in (1, 2)]
        caches = [model.prefix(obs) for obs in observations]
        both = Observation(*(torch.cat([getattr(o, f.name) for o in observations]) for f in fields(Observation)))
        batched = model.prefix(both)
    merged = type(caches[0]).concat(caches)
    for field in fields(merged):
        expected, value = getattr(batched, field.name), getattr(merged, field.name)
        if expected is None:
            assert value is None
            continue
        assert value.shape == expected.shape, field.name
        torch.testing.assert_close(value, expected, rtol=1e-4, atol=1e-5, msg=field.name)
