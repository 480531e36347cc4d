"""Every family's replica runs a whole inference at bf16 and fp16 (no dtype mismatch between the action loop's fp32
times or schedules and reduced-precision weights)."""

from __future__ import annotations

import pytest
import torch

from vlabench.backends.torch.backend import TorchPolicy
from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.timing import plain_inference
from vlabench.models.replicas import build_replica
from vlabench.models.specs import load_model_spec, model_names
from vlabench.models.workload import Workload, initial_noise, synthetic_observation

TINY = [name for name in model_names() if name.endswith("-tiny")]


@pytest.mark.parametrize("precision", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", TINY)
def test_a_reduced_precision_inference_runs_and_is_finite(name, precision):
    spec, cpu = load_model_spec(name), torch.device("cpu")
    workload = Workload.from_spec(spec)
    model = build_replica(spec, 0, precision, cpu)
    obs = synthetic_observation(spec, workload, 0, precision, cpu)
    noise = initial_noise(workload, 0, precision, cpu)
    actions = plain_inference(TorchPolicy(model, cpu), make_action_loop(spec, workload, cpu), obs, noise)
    assert actions.shape[0] == workload.batch and torch.isfinite(actions.float()).all()


@pytest.mark.parametrize("name", ["smolvla-tiny", "pi0-tiny", "pi05-tiny"])
def test_the_flow_experts_predict_the_chunk_the_workload_asks_for(name):
    spec, cpu = load_model_spec(name), torch.device("cpu")
    workload = Workload.from_spec(spec, chunk=spec.action.chunk + 3)
    model = build_replica(spec, 0, torch.float32, cpu)
    obs = synthetic_observation(spec, workload, 0, torch.float32, cpu)
    noise = initial_noise(workload, 0, torch.float32, cpu)
    actions = plain_inference(TorchPolicy(model, cpu), make_action_loop(spec, workload, cpu), obs, noise)
    assert actions.shape == noise.shape and actions.shape[1] == spec.action.chunk + 3


@pytest.mark.parametrize("name", ["openvla-7b-tiny", "smolvla-tiny"])
def test_a_reduced_precision_replica_is_allocated_at_that_precision(name, monkeypatch):
    # the whole model is allocated once: in fp32 first, a bf16 OpenVLA-7B would need about 28 GiB on a 24 GB host
    allocated = []
    original = torch.nn.Module.to_empty

    def spy(module, *args, **kwargs):
        allocated.extend(p.dtype for p in module.parameters() if p.is_floating_point())
        return original(module, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to_empty", spy)
    model = build_replica(load_model_spec(name), 0, torch.bfloat16, torch.device("cpu"))
    assert allocated and set(allocated) == {torch.bfloat16}
    assert {p.dtype for p in model.parameters() if p.is_floating_point()} == {torch.bfloat16}
