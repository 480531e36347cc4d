"""A compiled denoising step gathers RoPE's tabulated cos and sin (``RotaryTable``) instead of recomputing them in
every layer."""

import torch

from vlabench.models.replicas import build_replica
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation


def test_a_compiled_denoising_step_gathers_rope_instead_of_recomputing_it_per_layer():
    from torch._inductor.utils import run_and_get_code

    spec = load_model_spec("smolvla-tiny")
    workload = Workload.from_spec(spec)
    cpu = torch.device("cpu")
    model = build_replica(spec, 0, torch.float32, cpu)
    with torch.inference_mode():
        cache = model.prefill(
            obs := synthetic_observation(spec, workload, 0, torch.float32, cpu), model.embed_images(obs.images)
        )
        step = torch.compile(model.denoise_step, fullgraph=True, dynamic=False)
        noise = initial_noise(workload, 0, torch.float32, cpu)
        _, (code,) = run_and_get_code(step, noise, torch.full((workload.batch,), 0.5), cache)
    # sin and cos are left only where the step's time embedding computes them (4 calls in Inductor's kernels); with
    # RoPE computed from the positions, its pow, sin and cos were inlined into the layers' kernels: 16 calls in all
    assert code.count(".cos()") + code.count(".sin()") <= 4
