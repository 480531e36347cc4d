"""``--quant-scheme``: the int8 scheme of the backends that have a choice (OpenVINO ptq/weights, ONNX Runtime
dynamic/qdq, torch and torch-compile amx/vnni/torchao on the CPU) reaches the run and its result; any other use is
refused up front with the valid choices."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.errors import InputError

pytest.importorskip("onnxruntime")
runner = CliRunner()
pytestmark = pytest.mark.usefixtures("module_cache")


@pytest.mark.parametrize(
    ("backend", "scheme", "words"),
    [
        ("onnxruntime", "qdq", "static QDQ int8"),
        ("onnxruntime", "dynamic", "dynamic int8"),
        ("torch", "torchao", "torchao int8 dynamic activation"),
        *(
            pytest.param(
                "torch",
                isa,
                words,
                marks=pytest.mark.skipif(
                    __import__("vlabench.kernels.amx_int8").kernels.amx_int8.unavailable_reason(isa) is not None,
                    reason=f"the {isa} path of vlabench's int8 kernel cannot run here",
                ),
            )
            for isa, words in (
                ("amx", "vlabench AMX int8 kernel"),
                ("vnni", "vlabench int8 kernel on AVX512-VNNI"),
                ("avx2", "vlabench int8 kernel on AVX2"),
            )
        ),
        pytest.param(
            "openvino",
            "weights",
            "INT8_ASYM",
            marks=pytest.mark.skipif(
                __import__("importlib").util.find_spec("nncf") is None, reason="NNCF is not installed"
            ),
        ),
    ],
)
def test_the_chosen_scheme_runs_and_is_recorded(fast_run, tmp_path, backend, scheme, words):
    args = [
        "run",
        "-m",
        "pi0-tiny",
        "-b",
        backend,
        "--precision",
        "int8",
        "--quant-scheme",
        scheme,
        "-o",
        str(tmp_path),
    ]
    result = runner.invoke(app, [*args, *fast_run.args(warmup=0, min_iterations=1), "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert words in run["backend_details"]["quantization"] and run["correctness"]["passed"]
    assert run["config"]["quant_scheme"] == scheme


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-b", "openvino", "--precision", "int8", "--quant-scheme", "wieghts"], "Did you mean 'weights'"),
        (
            ["-b", "onnxruntime", "--precision", "int8", "--quant-scheme", "ptq"],
            "Valid onnxruntime int8 schemes: dynamic, qdq",
        ),
        (["-b", "onnxruntime", "--precision", "fp32", "--quant-scheme", "qdq"], "this run is fp32"),
        (
            ["-b", "torch", "--precision", "int8", "--quant-scheme", "dynamic"],
            "Valid torch int8 schemes: amx, avx2, torchao, vnni",
        ),
        (
            ["-b", "tensorrt", "--precision", "int8", "--quant-scheme", "qdq"],
            "applies to torch, torch-compile, onnxruntime, openvino",
        ),
    ],
)
def test_a_scheme_that_cannot_apply_is_refused_before_any_work(fast_run, tmp_path, extra, message):
    result = runner.invoke(
        app,
        [
            "run",
            "-m",
            "smolvla-tiny",
            *extra,
            "-o",
            str(tmp_path),
            *fast_run.args(warmup=0, min_iterations=1),
            "--json",
        ],
    )
    assert result.exit_code == InputError.exit_code, result.output
    assert message in " ".join(result.output.split())
    assert not list(tmp_path.iterdir())
