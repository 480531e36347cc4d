"""VLABENCH_MAX_CPU_ISA (``hardware/isa_cap.py``): a lesser x86 class emulated on this CPU. The flags above the cap
are hidden from vlabench's decisions, the runtimes take their own caps from the same entry, the result records
them, the benchmark leaves out what cannot be capped, and a bad name is a usage error."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.support.kernels import FAMILIES, ZEN4_FLAGS
from vlabench.cli.app import app
from vlabench.errors import InputError
from vlabench.hardware.detection import cpu_has_native_bf16, read_cpu_flags
from vlabench.hardware.isa_cap import ENV, recorded_caps, runtime_environment

SAPPHIRE_RAPIDS_EXTRA = {"amx_tile", "amx_int8", "amx_bf16", "avx512_fp16", "avx_vnni"}


def cpuinfo(tmp_path, flags: set[str]):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: test CPU\nflags\t\t: {' '.join(sorted(flags))}\n")
    return path


def test_a_cap_hides_the_flags_above_it(tmp_path, monkeypatch):
    path = cpuinfo(tmp_path, ZEN4_FLAGS | SAPPHIRE_RAPIDS_EXTRA)
    monkeypatch.delenv(ENV, raising=False)
    assert read_cpu_flags(path) == ZEN4_FLAGS | SAPPHIRE_RAPIDS_EXTRA and cpu_has_native_bf16(path)
    monkeypatch.setenv(ENV, "avx2")
    flags = read_cpu_flags(path)
    assert {"avx", "avx2", "fma", "f16c", "bmi2", "sse4_2"} <= flags
    assert not [flag for flag in flags if flag.startswith(("avx512", "amx", "avx_vnni"))]
    assert not cpu_has_native_bf16(path)
    monkeypatch.setenv(ENV, "avx512_vnni")
    flags = read_cpu_flags(path)
    assert {"avx2", "avx512f", "avx512bw", "avx512_vnni"} <= flags
    assert not flags & {"avx512_bf16", "avx512_fp16", "avx_vnni", *SAPPHIRE_RAPIDS_EXTRA}


def test_vlabenchs_decisions_follow_the_cap(monkeypatch):
    """On this CPU under the avx2 cap: bf16 is not native, int8 is (VPMADDUBSW), the int8 kernel takes its AVX2 path
    with fp32 float parts, the benchmark's class is no-native-bf16 and ONNX Runtime is left out with why."""
    from tests.support.benchmarks import load
    from vlabench.commands.run.precision_auto import native_reason
    from vlabench.kernels import amx_int8

    if not {"avx2", "fma"} <= read_cpu_flags():
        pytest.skip("this CPU has no AVX2: there is nothing above the cap to hide")
    monkeypatch.setenv(ENV, "avx2")
    assert "emulated" in native_reason("bf16", "cpu") and native_reason("int8", "cpu") is None
    assert amx_int8.unavailable_reason("vnni") is not None and amx_int8.float_dtype("vnni").is_floating_point
    if amx_int8.unavailable_reason("avx2") is None:
        assert amx_int8.runnable_path() == "avx2"
    backends = load("backends")
    assert backends.cpu_class(read_cpu_flags()) == "no-native-bf16"
    _, skipped = backends.variants(["onnxruntime:fp32", "torch:fp32"])
    assert any(entry.startswith(f"onnxruntime: not run under {ENV}=avx2") for entry in skipped)


def test_an_unknown_cap_is_a_usage_error_naming_the_valid_ones(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, "avx512vnni")
    with pytest.raises(InputError, match=r"did you mean 'avx512_vnni'\?\); valid: avx2, avx512_vnni"):
        read_cpu_flags()
    result = CliRunner().invoke(app, ["run", "-m", "smolvla-tiny", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "avx512_vnni" in result.output and "Traceback" not in result.output
    assert not list(tmp_path.glob("*.json"))


def test_the_runtimes_caps_come_from_the_same_entry_and_are_recorded(monkeypatch):
    from vlabench.hardware.detection import detect_host
    from vlabench.results.provenance import collect_provenance

    environment = runtime_environment("avx2")
    assert environment == {
        ENV: "avx2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3",
    }
    for name in environment:
        monkeypatch.delenv(name, raising=False)
    assert recorded_caps() == {} and collect_provenance(detect_host(), 1).isa_caps == {}
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert recorded_caps() == environment and collect_provenance(detect_host(), 1).isa_caps == environment
    with pytest.raises(InputError, match="valid: avx2, avx512_vnni"):
        runtime_environment("sse4")


def test_a_capped_run_takes_the_avx2_paths_passes_the_gate_and_says_so(fast_run, tmp_path):
    """A whole run in a process under the avx2 caps, torch and OpenVINO int8 on smolvla-tiny: torch on the kernel's
    AVX2 path with fp32 float parts, OpenVINO at f32 between its int8 ops with NNCF's overflow fix on every layer,
    both inside the int8 gate; the plan warns of the emulation and each result records the caps."""
    pytest.importorskip("torchao")
    pytest.importorskip("nncf")
    if not {"avx2", "fma"} <= read_cpu_flags():
        pytest.skip("this CPU has no AVX2")
    environment = {**os.environ, **runtime_environment("avx2")}
    command = [sys.executable, "-m", "vlabench", "run", "-m", "smolvla-tiny", "-b", "torch,openvino"]
    command += ["--precision", "int8", "-o", str(tmp_path), *fast_run.args()]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{ENV}=avx2: emulating an x86-64-v3 CPU" in " ".join((done.stdout + done.stderr).split())
    results = {json.loads(p.read_text())["backend"]: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(results) == {"torch", "openvino"}
    for result in results.values():
        assert result["provenance"]["isa_caps"] == runtime_environment("avx2")
        assert result["correctness"]["passed"], result["correctness"]
    torch_details, openvino_details = results["torch"]["backend_details"], results["openvino"]["backend_details"]
    assert torch_details["quantization_scheme"] == "avx2" and torch_details["float_activations"] == "fp32"
    assert openvino_details["effective_inference_precision"] == "f32"
    assert "overflow fix enable" in openvino_details["quantization"]


@pytest.mark.parametrize("name", [name for name in FAMILIES if name != "smolvla-tiny"])
def test_a_capped_torch_int8_run_of_every_other_family_takes_the_avx2_path(fast_run, name, tmp_path):
    """The other model families under the avx2 caps (smolvla-tiny is run above): torch int8 on the kernel's AVX2
    path (7-bit weights) with fp32 float parts, inside the int8 gate, the caps recorded."""
    pytest.importorskip("torchao")
    if not {"avx2", "fma"} <= read_cpu_flags():
        pytest.skip("this CPU has no AVX2")
    environment = {**os.environ, **runtime_environment("avx2")}
    command = [sys.executable, "-m", "vlabench", "run", "-m", name, "-b", "torch", "--precision", "int8"]
    command += ["-o", str(tmp_path), *fast_run.args()]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result,) = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    assert result["provenance"]["isa_caps"] == runtime_environment("avx2")
    assert result["correctness"]["passed"], result["correctness"]
    details = result["backend_details"]
    assert details["quantization_scheme"] == "avx2" and "7-bit" in details["quantization"]
    assert details["float_activations"] == "fp32" and details["quantized_linears"] > 0


def test_openvino_ptq_takes_the_overflow_fix_only_without_vnni(monkeypatch):
    """Without an int8 dot product into int32 (VNNI, AMX) every layer's weights go to 7 bits, and the choice is part
    of the quantized graph's cache key and of the recorded scheme."""
    import vlabench.backends.openvino.quantize as openvino_quantize

    monkeypatch.setattr(openvino_quantize, "read_cpu_flags", lambda: {"avx2", "fma"})
    avx2 = openvino_quantize.scheme_identity("int8", "ptq", 0)
    monkeypatch.setattr(openvino_quantize, "read_cpu_flags", lambda: {"avx2", "avx512_vnni"})
    vnni = openvino_quantize.scheme_identity("int8", "ptq", 0)
    assert (avx2["overflow_fix"], vnni["overflow_fix"]) == ("enable", "first_layer_only")
    assert "overflow_fix" not in openvino_quantize.scheme_identity("int8", "weights", 0)
    text = openvino_quantize.describe("int8", "ptq", avx2)
    assert "overflow fix enable: every layer's weights in 7 bits" in text
    assert "overflow fix first_layer_only)" in openvino_quantize.describe("int8", "ptq", vnni)


def test_the_linear_benchmark_reruns_itself_under_every_cap_and_says_so(tmp_path):
    """``amx_linear.py --max-cpu-isa avx2`` re-executes under vlabench's and the runtimes' caps: the AVX2 path runs,
    the flags above the cap are gone from the artifact, which names the class it emulated and each cap."""
    pytest.importorskip("torchao")
    from tests.support.benchmarks import BENCHMARKS
    from vlabench.kernels import amx_int8

    if amx_int8.unavailable_reason("avx2"):
        pytest.skip(f"the avx2 path cannot run here: {amx_int8.unavailable_reason('avx2')}")
    out = tmp_path / "linear.json"
    command = [sys.executable, str(BENCHMARKS / "amx_linear.py"), "--model", "smolvla-tiny", "--calls", "3"]
    command += ["--repeats", "1", "--cold-mib", "0.5", "--max-cpu-isa", "avx2", "--json-out", str(out)]
    environment = {name: value for name, value in os.environ.items() if name != ENV}
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["kernel"] == "avx2" and doc["cpu"]["isa_caps"] == runtime_environment("avx2")
    assert "AMD Zen 2 and 3" in doc["cpu"]["emulates"]
    assert not [flag for flag in doc["cpu"]["flags"] if flag.startswith(("avx512", "amx"))]
