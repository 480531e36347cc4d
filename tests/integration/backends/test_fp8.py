"""``--precision fp8``: torchao's e4m3 weights on every model family (weight-only and emulated on the CPU, weights
and activations on CUDA GPUs of compute capability 8.9 and later), within the gate; declared only where it runs,
refused with the valid names elsewhere, never picked by ``--precision auto`` on a CPU."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.commands.run import plan_run
from vlabench.commands.run.precision_auto import candidates, native_reason
from vlabench.config import RunConfig
from vlabench.results.schema import load_result

pytest.importorskip("torchao")

from tests.support.quantized_reference import run_against_reference
from vlabench.backends.onnxruntime.backend import OnnxRuntimeBackend
from vlabench.backends.openvino.backend import OpenVinoBackend
from vlabench.backends.torch.backend import TorchBackend
from vlabench.backends.torch.quant_layers import fp8_takes, int4_group
from vlabench.backends.torch.quantize import CastLinear, Quantizer, cuda_quantized_precisions

CPU = torch.device("cpu")
FAMILIES = [
    "smolvla-tiny",
    "pi0-tiny",
    "gr00t-n1.5-tiny",
    "act-tiny",
    "diffusion-policy-tiny",
    "openvla-7b-tiny",
    "pi0-fast-tiny",
]
TOKEN_MODELS = {"openvla-7b-tiny", "pi0-fast-tiny"}

pytestmark = pytest.mark.usefixtures("module_cache")


def fp8_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [m.inner.weight for m in model.modules() if isinstance(m, CastLinear)]


@pytest.mark.parametrize("name", FAMILIES)
def test_torch_fp8_quantizes_every_family_and_passes_the_gate(name, tiny_inputs):
    """Every Linear the scheme takes holds e4m3 codes with a scale per output channel; the actions move off fp32's
    (token models: keep their tokens) and stay within fp8's tolerance."""
    policy = TorchBackend().prepare(*tiny_inputs(name)[:2], CPU, "fp8", 0)
    details = policy.details()
    assert "fp8 weight-only" in details["quantization"] and details["float_activations"] == "fp32"
    weights = fp8_weights(policy.model)
    assert len(weights) == details["quantized_linears"] > 0
    for weight in weights:
        assert weight.qdata.dtype == torch.float8_e4m3fn and weight.scale.shape == (weight.shape[0], 1)
    actions, (verdict, cosine), agreement = run_against_reference(policy, name, tiny_inputs, "fp8")
    assert torch.isfinite(actions).all() and verdict.passed, verdict
    if name in TOKEN_MODELS:
        assert agreement is None or agreement == 1.0
    else:
        assert verdict.max_abs_error > 0 and cosine > 0.99  # quantized, and close


def test_fp8_is_declared_where_torchao_runs_it():
    assert "fp8" in TorchBackend().precisions(CPU)
    assert cuda_quantized_precisions((8, 6)) == ("int8", "int4")  # Ampere: no fp8 tensor cores
    assert cuda_quantized_precisions((8, 9)) == ("int8", "fp8", "int4")  # Ada
    assert cuda_quantized_precisions((9, 0)) == ("int8", "fp8", "int4")  # Hopper
    assert cuda_quantized_precisions((7, 5)) == ("int8",)
    assert "fp8" not in OnnxRuntimeBackend().precisions(CPU)
    assert "fp8" not in OpenVinoBackend().precisions(CPU)


def test_fp8_on_cuda_keeps_float_the_layers_scaled_mm_cannot_take():
    """torchao would leave them in bf16 silently; the quantizer keeps them float itself, so the counts are true."""
    assert fp8_takes(torch.nn.Linear(32, 720), "cuda") and not fp8_takes(torch.nn.Linear(720, 10), "cuda")
    assert not fp8_takes(torch.nn.Linear(20, 32), "cuda")
    quantizer = Quantizer(torch.device("cuda"), "fp8")  # built without a GPU; only a refused layer is handed to it
    assert quantizer("action_out_proj", torch.nn.Linear(720, 10)) is None
    assert quantizer.kept == {"action_out_proj": 7200} and not quantizer.quantized
    weight_only = Quantizer(CPU, "fp8")("action_out_proj", torch.nn.Linear(720, 10))  # weight-only takes any shape
    assert weight_only.inner.weight.qdata.dtype == torch.float8_e4m3fn


def test_cuda_int4_keeps_float_the_layers_its_group_does_not_divide():
    """torchao's CUDA int4 skips an input width that is not a multiple of its group (128) without a word, too."""
    quantizer = Quantizer(torch.device("cuda"), "int4")
    assert quantizer("state_proj", torch.nn.Linear(96, 720)) is None  # 96: the CPU kernel would take it in groups of 32
    assert quantizer.kept == {"state_proj": 69120} and not quantizer.quantized
    assert int4_group(torch.nn.Linear(96, 720)) == 32 and int4_group(torch.nn.Linear(256, 720), "cuda") == 128


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_backends_without_fp8_refuse_it_naming_theirs(fast_run, backend):
    result = CliRunner().invoke(
        app, ["run", "-m", "smolvla-tiny", "-b", backend, "--precision", "fp8", *fast_run.args()]
    )
    assert result.exit_code != 0 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "fp8" in text and "int8" in text, text


def test_auto_never_probes_fp8_on_a_cpu():
    reason = native_reason("fp8", "cpu", {"amx_bf16", "amx_int8", "avx512_fp16"})
    assert reason and "no CPU computes fp8" in reason
    assert native_reason("fp8", "cuda") is None  # declared only on GPUs that compute it
    plan = plan_run(RunConfig(model="smolvla-tiny", precision="auto", energy_meter="none"))
    probe, skipped = candidates(plan, flags={"amx_bf16", "amx_int8"})
    assert "fp8" not in probe and {s.precision: s.note for s in skipped}["fp8"] == reason


def test_an_fp8_run_records_its_scheme_and_error(fast_run, tmp_path):
    args = ["run", "-m", "pi0-tiny", "--precision", "fp8", "--json", "-o", str(tmp_path), *fast_run.args()]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["precision"] == "fp8" and run["correctness"]["passed"]
    assert "fp8" in run["backend_details"]["quantization"]
    saved = load_result(next(tmp_path.glob("*.json")))
    assert saved.config.precision == "fp8" and saved.correctness.max_abs_error > 0
