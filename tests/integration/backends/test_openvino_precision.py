"""OpenVINO bf16 (precision-sensitive ops pinned to f32) and NNCF int8/int4, each through the correctness gate."""

import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
import torch

import vlabench.backends.openvino.quantize as openvino_quantize
from vlabench.backends.openvino.backend import OpenVinoBackend
from vlabench.errors import UnavailableError
from vlabench.hardware.detection import cpu_has_native_bf16
from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.correctness import compare, reference_actions

pytest.importorskip("openvino")
CPU = torch.device("cpu")
needs_nncf = pytest.mark.skipif(openvino_quantize.nncf_missing() is not None, reason="NNCF is not installed")


@pytest.fixture(autouse=True)
def _cache(module_cache, monkeypatch):
    monkeypatch.setattr(openvino_quantize, "CALIBRATION_OBSERVATIONS", 2)  # keeps PTQ fast; still seeded


def gate(tiny_inputs, name, precision, backend=None, input_dtype=torch.float32):
    """The run's check: actions from the run's inputs against fp32 eager torch on the fp32 inputs."""
    spec, workload, obs, noise = tiny_inputs(name)
    reference = reference_actions(spec, workload, 0, obs, noise, CPU)
    _, _, run_obs, run_noise = tiny_inputs(name, dtype=input_dtype)
    policy = (backend or OpenVinoBackend()).prepare(spec, workload, CPU, precision, seed=0)
    actions = make_action_loop(spec, workload, CPU).sample(policy, policy.prefix(run_obs), run_noise)
    return compare(actions, reference, run_noise, precision), policy.details()


def native_bf16() -> bool:
    import openvino

    return cpu_has_native_bf16() and "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


@pytest.mark.skipif(not native_bf16(), reason="this CPU has no native bf16 (AVX512-BF16 or AMX): OpenVINO refuses it")
@pytest.mark.parametrize("name", ["smolvla-tiny", "pi0-tiny"])
def test_bf16_passes_the_gate_with_time_and_rope_angles_kept_f32(name, tiny_inputs):
    verdict, details = gate(tiny_inputs, name, "bf16", input_dtype=torch.bfloat16)
    assert verdict.passed, verdict
    assert details["effective_inference_precision"] == "bf16" and details["kept_f32_ops"] > 0


@pytest.mark.skipif(not native_bf16(), reason="this CPU has no native bf16 (AVX512-BF16 or AMX): OpenVINO refuses it")
def test_bf16_after_fp32_of_the_same_graph_compiles_its_own_blob(tiny_inputs):
    """OpenVINO files a compiled blob under one key whatever the inference precision: bf16 must not load fp32's."""
    spec, workload, _, _ = tiny_inputs("smolvla-tiny")
    fp32 = OpenVinoBackend().prepare(spec, workload, CPU, "fp32", seed=0).details()
    verdict, bf16 = gate(tiny_inputs, "smolvla-tiny", "bf16", input_dtype=torch.bfloat16)
    assert verdict.passed, verdict
    assert fp32["cache_dir"] != bf16["cache_dir"] and all(
        any(Path(details["cache_dir"]).glob("*.blob")) for details in (fp32, bf16)
    )


@needs_nncf
@pytest.mark.parametrize(
    ("name", "precision", "scheme", "words"),
    [
        ("smolvla-tiny", "int4", "weights", "INT4_SYM"),
        ("pi0-tiny", "int4", "weights", "INT4_SYM"),
        ("pi05-tiny", "int8", "weights", "INT8_ASYM"),
        ("pi0-tiny", "int8", "ptq", "activations int8"),
        ("smolvla-tiny", "int8", "ptq", "prefill default, weight matmuls only"),
    ],
)
def test_quantized_runs_pass_their_tolerance_and_record_the_scheme(name, precision, scheme, words, tiny_inputs):
    verdict, details = gate(tiny_inputs, name, precision, OpenVinoBackend(int8_scheme=scheme))
    assert verdict.passed, verdict
    assert 0 < verdict.relative_error <= verdict.tolerance.max_relative_error  # the open-loop action error
    assert details["quantization_scheme"] == scheme and words in details["quantization"]
    between = "bf16" if native_bf16() and precision == "int8" else "f32"  # the float ops between quantized ones
    assert details["effective_inference_precision"] == between and details["nncf"]
    if scheme == "ptq":
        assert f"from seed {openvino_quantize.CALIBRATION_SEED_OFFSET}" in details["quantization"]


@needs_nncf
def test_quantized_graphs_are_cached_and_rebuilt_when_a_key_part_changes(tiny_inputs, monkeypatch):
    spec, workload, _, _ = tiny_inputs("smolvla-tiny")
    first = OpenVinoBackend().prepare(spec, workload, CPU, "int4", seed=0).details()
    again = OpenVinoBackend().prepare(spec, workload, CPU, "int4", seed=0).details()
    assert again["quantized_ir_reused"] and again["ir_folder"] == first["ir_folder"]
    monkeypatch.setattr(openvino_quantize, "INT4_GROUP_SIZES", (32,))
    changed = OpenVinoBackend().prepare(spec, workload, CPU, "int4", seed=0).details()
    assert not changed["quantized_ir_reused"] and changed["ir_folder"] != first["ir_folder"]


@needs_nncf
def test_corrupted_compressed_weights_fail_the_gate(tiny_inputs):
    spec, workload, _, _ = tiny_inputs("pi0-tiny")
    folder = OpenVinoBackend().prepare(spec, workload, CPU, "int4", seed=0).details()["ir_folder"]
    rng = np.random.default_rng(0)
    for xml in sorted(Path(folder).glob("*/*.xml")):
        data = bytearray(xml.with_suffix(".bin").read_bytes())
        for layer in ElementTree.parse(xml).getroot().iter("layer"):
            attributes = layer.find("data")
            if layer.get("type") == "Const" and attributes.get("element_type") in ("i4", "u4", "i8", "u8"):
                offset, size = int(attributes.get("offset")), int(attributes.get("size"))
                data[offset : offset + size] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        xml.with_suffix(".bin").write_bytes(bytes(data))
    verdict, details = gate(tiny_inputs, "pi0-tiny", "int4")
    assert details["quantized_ir_reused"] and not verdict.passed


def test_quantized_precisions_need_nncf(tiny_inputs, monkeypatch):
    monkeypatch.setattr("vlabench.backends.openvino.backend.nncf_missing", lambda: "needs NNCF: pip install nncf")
    backend = OpenVinoBackend()
    assert "int8" not in backend.precisions(CPU) and "fp32" in backend.precisions(CPU)
    spec, workload, _, _ = tiny_inputs("smolvla-tiny")
    with pytest.raises(UnavailableError, match="pip install nncf"):
        backend.prepare(spec, workload, CPU, "int4", seed=0)


def test_unknown_int8_scheme_is_refused():
    with pytest.raises(UnavailableError, match="schemes: ptq, weights"):
        OpenVinoBackend(int8_scheme="fp8")
