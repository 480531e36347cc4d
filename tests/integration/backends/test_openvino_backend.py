from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from vlabench.backends.base import BackendOptions
from vlabench.backends.openvino.backend import OpenVinoBackend
from vlabench.backends.torch.backend import TorchBackend
from vlabench.errors import UnavailableError
from vlabench.measure.action_loops import EulerLoop

pytest.importorskip("openvino")

TINY_MODELS = ["smolvla-tiny", "pi0-tiny", "pi05-tiny"]
CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("module_cache")


def actions(policy, workload, obs, noise) -> torch.Tensor:
    return EulerLoop(workload.steps, 1, CPU).sample(policy, policy.prefix(obs), noise)


@pytest.mark.parametrize("name", TINY_MODELS)
def test_fp32_matches_eager_torch(name, tiny_inputs):
    spec, workload, obs, noise = tiny_inputs(name)
    reference = actions(TorchBackend().prepare(spec, workload, CPU, "fp32", seed=0), workload, obs, noise)
    policy = OpenVinoBackend().prepare(spec, workload, CPU, "fp32", seed=0)
    chunk = actions(policy, workload, obs, noise)
    assert chunk.dtype == torch.float32 and chunk.shape == reference.shape
    assert (chunk - reference).abs().max() < 1e-3
    assert F.cosine_similarity(chunk.flatten(), reference.flatten(), dim=0) > 0.99999


def test_fp32_runs_f32_and_second_prepare_reuses_the_export(tiny_inputs):
    spec, workload, _, _ = tiny_inputs("smolvla-tiny")
    backend = OpenVinoBackend.from_options(BackendOptions())
    backend.prepare(spec, workload, CPU, "fp32", seed=0)
    details = backend.prepare(spec, workload, CPU, "fp32", seed=0).details()
    assert details["onnx_reused"]
    assert details["device_target"] == "CPU"
    assert details["requested_inference_precision"] == details["effective_inference_precision"] == "f32"
    assert details["performance_hint"] == "LATENCY" and details["inference_num_threads"] == 1
    assert any(Path(details["cache_dir"]).iterdir())


def test_precisions_are_what_the_cpu_computes_natively(tiny_inputs):
    import openvino

    capabilities = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    backend = OpenVinoBackend()
    precisions = backend.precisions(CPU)
    assert "fp32" in precisions
    assert ("bf16" in precisions) == ("BF16" in capabilities)
    assert ("fp16" in precisions) == ("FP16" in capabilities)
    spec, workload, _, _ = tiny_inputs("smolvla-tiny")
    for precision in {"bf16", "fp16"} - set(precisions):
        with pytest.raises(UnavailableError, match=f"no native {precision}"):
            backend.prepare(spec, workload, CPU, precision, seed=0)


def test_unknown_target_lists_the_available_devices():
    import openvino

    reason = OpenVinoBackend.from_options(BackendOptions(device_target="TPU")).unavailable_reason(CPU)
    available = ", ".join(openvino.Core().available_devices)
    assert "OpenVINO device 'TPU' is not available" in reason and f"available OpenVINO devices: {available}" in reason
    assert OpenVinoBackend().unavailable_reason(CPU) is None


def test_cuda_torch_device_is_refused():
    assert "host tensors" in OpenVinoBackend().unavailable_reason(torch.device("cuda"))
