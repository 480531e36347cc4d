import pytest
import torch
import torch.nn.functional as F

from vlabench.backends import get_backend
from vlabench.backends.torch.backend import TorchBackend
from vlabench.commands.run import execute, plan_run
from vlabench.config import RunConfig
from vlabench.measure.action_loops import EulerLoop
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import Precision

TINY_MODELS = ["smolvla-tiny", "pi0-tiny", "pi05-tiny"]
CUDA_MISSING = TorchBackend().unavailable_reason(torch.device("cuda"))
needs_cuda = pytest.mark.skipif(CUDA_MISSING is not None, reason=f"the torch backend on CUDA: {CUDA_MISSING}")


def sample_actions(name: str, precision: str, device: torch.device) -> torch.Tensor:
    spec = load_model_spec(name)
    workload = Workload.from_spec(spec)
    dtype = Precision.DTYPES[precision]
    policy = get_backend("torch").prepare(spec, workload, device, precision, seed=0)
    obs = synthetic_observation(spec, workload, 0, dtype, device)
    noise = initial_noise(workload, 0, dtype, device)
    return EulerLoop(workload.steps, 1, device).sample(policy, policy.prefix(obs), noise).float().cpu()


@pytest.mark.parametrize("name", TINY_MODELS)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_tracks_fp32_on_cpu(name, precision):
    """Same seeded weights, inputs and noise at every precision: only rounding separates the action chunks."""
    cpu = torch.device("cpu")
    reference = sample_actions(name, "fp32", cpu)
    actions = sample_actions(name, precision, cpu)
    assert actions.dtype == torch.float32 and actions.shape == reference.shape
    assert F.cosine_similarity(actions.flatten(), reference.flatten(), dim=0) > 0.999
    assert (actions - reference).abs().max() < 0.25
    assert not torch.equal(actions, reference)


@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_matches_cpu(precision):
    reference = sample_actions("pi0-tiny", "fp32", torch.device("cpu"))
    actions = sample_actions("pi0-tiny", precision, torch.device("cuda"))
    assert F.cosine_similarity(actions.flatten(), reference.flatten(), dim=0) > 0.999


@needs_cuda
def test_cuda_run_records_device_memory_and_defaults_to_bf16():
    result = execute(plan_run(RunConfig(model="smolvla-tiny", device="cuda", min_iterations=2, min_duration_s=0)))
    assert result.precision == "bf16"
    assert result.device.torch_device.startswith("cuda")
    assert result.memory.cuda_max_allocated_bytes > 0
