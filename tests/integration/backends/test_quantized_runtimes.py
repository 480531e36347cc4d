"""int8 / int4 through ONNX Runtime's quantizers and torchao / torch's int4 kernels, on tiny models of several
families: each records its scheme and its open-loop error against the fp32 eager reference (token models: token
agreement); the quantized ONNX graphs are cached by key; the planner sizes quantized OpenVLA-7B correctly."""

from dataclasses import replace

import pytest
import torch

from vlabench.analysis.memory import check_fits, estimate_footprint
from vlabench.errors import InputError, InsufficientMemoryError
from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.correctness import compare, reference_actions
from vlabench.models.replicas import build_replica
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload

pytest.importorskip("torchao")
pytest.importorskip("onnxruntime")

import vlabench.backends.onnxruntime.quantize as onnxruntime_quantize
from tests.support.quantized_reference import check, run_against_reference
from vlabench.backends.onnx_export import export_onnx
from vlabench.backends.onnxruntime.backend import OnnxRuntimeBackend
from vlabench.backends.torch.backend import TorchBackend
from vlabench.backends.torch.quantize import Int4PackedLinear, quantized_precisions

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("module_cache")


@pytest.mark.parametrize(
    ("name", "precision"),
    [("smolvla-tiny", "int8"), ("pi0-tiny", "int4"), ("openvla-7b-tiny", "int8"), ("act-tiny", "int4")],
)
def test_torch_quantized_records_scheme_and_error(name, precision, tiny_inputs):
    policy = TorchBackend().prepare(*tiny_inputs(name)[:2], CPU, precision, 0)
    details = policy.details()
    assert ("int4 weight-only" if precision == "int4" else "int8") in details["quantization"]
    assert details["quantized_linears"] > 0 and 0 < details["quantized_weight_share"] <= 1
    if precision == "int4":
        assert any(isinstance(module, Int4PackedLinear) for module in policy.model.modules())
    actions, verdict, agreement = run_against_reference(policy, name, tiny_inputs, precision)
    assert torch.isfinite(actions).all()
    check(verdict, agreement, name, precision)


def test_torch_int4_differs_from_fp32_but_stays_close(tiny_inputs):
    """int4 weights change the actions (the layers really are quantized) without wrecking them."""
    policy = TorchBackend().prepare(*tiny_inputs("pi0-tiny")[:2], CPU, "int4", 0)
    spec, workload, obs, noise = tiny_inputs("pi0-tiny")
    with torch.inference_mode():
        actions = make_action_loop(spec, workload, CPU, None).sample(policy, policy.prefix(obs), noise)
    verdict = compare(actions, reference_actions(spec, workload, 0, obs, noise, CPU), noise, "bf16")
    assert verdict.max_abs_error > 0
    assert verdict.displacement_cosine > 0.9


def test_streamed_build_matches_the_whole_build():
    """Building module by module (the low-memory quantized path) draws exactly the weights of the normal build."""
    spec = load_model_spec("openvla-7b-tiny")
    whole = build_replica(spec, 3, torch.float32, CPU).state_dict()
    streamed = build_replica(spec, 3, torch.float32, CPU, transform=lambda name, module: None).state_dict()
    assert whole.keys() == streamed.keys()
    assert all(torch.equal(whole[key], streamed[key]) for key in whole)


@pytest.mark.parametrize(
    ("name", "precision", "scheme"),
    [
        ("smolvla-tiny", "int8", "dynamic"),
        ("smolvla-tiny", "int8", "qdq"),
        ("smolvla-tiny", "int4", "dynamic"),
        ("openvla-7b-tiny", "int8", "dynamic"),
        ("act-tiny", "int8", "dynamic"),
    ],
)
def test_onnxruntime_quantized_records_scheme_and_error(name, precision, scheme, tiny_inputs):
    policy = OnnxRuntimeBackend(int8_scheme=scheme).prepare(*tiny_inputs(name)[:2], CPU, precision, 0)
    expected = onnxruntime_quantize.SCHEMES[scheme if precision == "int8" else "matmul-nbits"]
    assert policy.details()["quantization"] == expected
    ops = {node.op_type for graph in policy.sessions for node in _graph(policy, graph).graph.node}
    marker = {"dynamic": "DynamicQuantizeLinear", "qdq": "QuantizeLinear"}.get(scheme)
    assert (marker if precision == "int8" else "MatMulNBits") in ops
    _, verdict, agreement = run_against_reference(policy, name, tiny_inputs, precision)
    check(verdict, agreement, name, precision)


def _graph(policy, graph):
    import onnx

    return onnx.load(policy.details()["quantized_folder"] + f"/{graph}/{graph}.onnx", load_external_data=False)


def test_quantized_graphs_are_reused_and_rekeyed(tiny_inputs):
    """After the tests above quantized smolvla-tiny both ways, each scheme reuses its own folder; the key also
    changes with the exported graphs (spec, shapes, seed, torch) and the onnxruntime version."""
    spec, workload = tiny_inputs("smolvla-tiny")[:2]
    dynamic = OnnxRuntimeBackend().prepare(spec, workload, CPU, "int8", 0).details()
    qdq = OnnxRuntimeBackend(int8_scheme="qdq").prepare(spec, workload, CPU, "int8", 0).details()
    assert dynamic["quantized_reused"] and qdq["quantized_reused"]
    assert dynamic["quantized_folder"] != qdq["quantized_folder"]
    exported = export_onnx(spec, workload, "fp32", 0)
    assert onnxruntime_quantize.quant_key(exported, "dynamic", ort_version()) in dynamic["quantized_folder"]
    other_graphs = replace(exported, folder=exported.folder.with_name(exported.folder.name + "-seed1"))
    keys = {
        onnxruntime_quantize.quant_key(exported, "dynamic", ort_version()),
        onnxruntime_quantize.quant_key(exported, "qdq", ort_version()),
        onnxruntime_quantize.quant_key(exported, "dynamic", "0.0.0-other"),
        onnxruntime_quantize.quant_key(other_graphs, "dynamic", ort_version()),
    }
    assert len(keys) == 4


def ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def test_unknown_int8_scheme_is_a_clear_error():
    with pytest.raises(InputError, match="dynamic, qdq"):
        OnnxRuntimeBackend(int8_scheme="matmul-nbits")


def test_backends_declare_quantized_precisions_on_cpu():
    assert {"int8", "int4"} <= set(TorchBackend().precisions(CPU))
    assert {"int8", "int4"} <= set(OnnxRuntimeBackend().precisions(CPU))
    assert "int8" not in OnnxRuntimeBackend(ep="cuda").precisions(torch.device("cuda:0"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torchao's CUDA int8/int4 paths need a CUDA device")
def test_cuda_quantized_precisions_follow_the_device():
    capability = torch.cuda.get_device_capability()
    assert ("int4" in quantized_precisions(torch.device("cuda:0"))) == (capability >= (8, 0))


def test_planner_accepts_openvla_7b_int4_and_refuses_fp32(monkeypatch):
    """Planning only: on a 24 GB host with 20 GiB free, int4 fits and fp32 is refused with its reason."""
    spec = load_model_spec("openvla-7b")
    workload = Workload.from_spec(spec)
    monkeypatch.setattr("vlabench.analysis.memory.available_bytes", lambda device: 20 * 2**30)
    int4 = estimate_footprint(spec, workload, "int4", "torch", 10)
    fp32 = estimate_footprint(spec, workload, "fp32", "torch", 10)
    assert int4.weights_bytes < fp32.weights_bytes / 4
    assert int4.weights_bytes > spec_linear_int4_floor(int4.params)
    check_fits(spec, int4, CPU, "int4")
    with pytest.raises(InsufficientMemoryError, match=r"openvla-7b at fp32 needs about .* int8/int4"):
        check_fits(spec, fp32, CPU, "fp32")


def spec_linear_int4_floor(params: int) -> int:
    """No int4 model is smaller than half a byte per parameter."""
    return params // 2
