import enum
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import vlabench.backends.tensorrt.backend as tensorrt_backend
from vlabench.backends.tensorrt.backend import (
    NO_GPU,
    NOT_INSTALLED,
    TensorRtBackend,
    engine_cache_key,
    parse_onnx,
    torch_dtype,
)
from vlabench.backends.torch.backend import TorchBackend
from vlabench.errors import UnavailableError
from vlabench.measure.action_loops import EulerLoop
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import Precision

CUDA = torch.device("cuda")
TENSORRT_MISSING = TensorRtBackend().unavailable_reason(CUDA)
needs_tensorrt = pytest.mark.skipif(TENSORRT_MISSING is not None, reason=f"the TensorRT backend: {TENSORRT_MISSING}")


@pytest.fixture
def without_tensorrt(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)


@pytest.fixture
def fake_tensorrt(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))


def test_missing_tensorrt_is_reported_with_the_install_hint(without_tensorrt):
    for device in (CUDA, torch.device("cpu")):
        assert TensorRtBackend().unavailable_reason(device) == NOT_INSTALLED
    assert "pip install tensorrt" in NOT_INSTALLED


def test_missing_gpu_is_reported(fake_tensorrt, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert TensorRtBackend().unavailable_reason(CUDA) == NO_GPU == "TensorRT needs a CUDA GPU; none is visible"


def test_cpu_target_is_refused_even_with_a_gpu(fake_tensorrt, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert TensorRtBackend().unavailable_reason(torch.device("cpu")) == "TensorRT runs on a CUDA device, not cpu"


def test_prepare_refuses_before_exporting(without_tensorrt, monkeypatch):
    def timed_export(*args):
        raise AssertionError("prepare() exported although TensorRT is unavailable")

    monkeypatch.setattr(tensorrt_backend, "timed_export", timed_export)
    spec = load_model_spec("smolvla-tiny")
    with pytest.raises(UnavailableError, match="pip install tensorrt"):
        TensorRtBackend().prepare(spec, Workload.from_spec(spec), CUDA, "fp32", seed=0)


def test_precisions():
    assert TensorRtBackend().precisions(CUDA) == ("fp32", "fp16", "bf16")


def test_engine_cache_key_names_every_dependency():
    key = engine_cache_key("pi0-tiny-fp32-0123abcd", "fp16", "10.3.0", "NVIDIA H200 NVL")
    assert key == "pi0-tiny-fp32-0123abcd-fp16-trt10.3.0-NVIDIA-H200-NVL"
    assert engine_cache_key("pi0-tiny-fp32-0123abcd", "bf16", "10.3.0", "NVIDIA H200 NVL") != key
    assert engine_cache_key("pi0-tiny-fp32-0123abcd", "fp16", "10.4.0", "NVIDIA H200 NVL") != key
    assert "/" not in engine_cache_key("x", "fp32", "10.3.0", "NVIDIA A100/80GB (PCIe)")


def test_tensorrt_dtypes_map_to_torch_by_name():
    try:
        import tensorrt

        data_type = tensorrt.DataType
    except ImportError:
        data_type = enum.Enum("DataType", "FLOAT HALF BF16 INT32 INT64 BOOL")
    expected = {"FLOAT": torch.float32, "HALF": torch.float16, "BF16": torch.bfloat16}
    expected |= {"INT32": torch.int32, "INT64": torch.int64, "BOOL": torch.bool}
    assert {name: torch_dtype(data_type[name]) for name in expected} == expected
    with pytest.raises(UnavailableError, match="INT4"):
        torch_dtype(types.SimpleNamespace(name="INT4"))


def test_parse_errors_are_listed():
    class FailingParser:
        num_errors = 2

        def parse_from_file(self, path):
            return False

        def get_error(self, index):
            return ["unsupported op: Foo", "node bar: bad attribute"][index]

    with pytest.raises(UnavailableError, match=r"denoise\.onnx: unsupported op: Foo; node bar: bad attribute"):
        parse_onnx(FailingParser(), Path("denoise.onnx"))


def sample(policy, spec, workload, dtype):
    obs = synthetic_observation(spec, workload, 0, dtype, CUDA)
    noise = initial_noise(workload, 0, dtype, CUDA)
    return EulerLoop(workload.steps, workload.batch, CUDA).sample(policy, policy.prefix(obs), noise).float()


@needs_tensorrt
@pytest.mark.parametrize(("precision", "min_cosine"), [("fp32", 0.9999), ("fp16", 0.99), ("bf16", 0.99)])
def test_engines_track_eager_and_are_reused(precision, min_cosine, tmp_path, monkeypatch):
    monkeypatch.setenv("VLABENCH_CACHE", str(tmp_path))
    spec = load_model_spec("pi0-tiny")
    workload = Workload.from_spec(spec)
    reference = sample(TorchBackend().prepare(spec, workload, CUDA, "fp32", seed=0), spec, workload, torch.float32)
    built = TensorRtBackend().prepare(spec, workload, CUDA, precision, seed=0)
    actions = sample(built, spec, workload, Precision.DTYPES[precision])
    assert F.cosine_similarity(actions.flatten(), reference.flatten(), dim=0) > min_cosine
    if precision == "fp32":
        assert (actions - reference).abs().max() < 1e-3
    details = built.details()
    assert details["engines_reused"] == {"vision": False, "prefill": False, "denoise": False}
    assert Path(details["timing_cache"]).exists() and details["build_s"].keys() == {"vision", "prefill", "denoise"}
    reused = TensorRtBackend().prepare(spec, workload, CUDA, precision, seed=0)
    assert all(reused.details()["engines_reused"].values()) and reused.details()["build_s"] == {}
    assert torch.equal(sample(reused, spec, workload, Precision.DTYPES[precision]), actions)


@needs_tensorrt
def test_real_parser_errors_raise_unavailable(tmp_path):
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    with pytest.raises(UnavailableError, match=r"TensorRT cannot parse broken\.onnx"):
        parse_onnx(trt.OnnxParser(network, logger), broken)
