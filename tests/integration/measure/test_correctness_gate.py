import json

import pytest
import torch
from typer.testing import CliRunner

from vlabench.analysis.cet import rank
from vlabench.backends.torch.backend import TorchBackend, TorchPolicy
from vlabench.cli.app import app
from vlabench.commands.run import execute_many, plan_run
from vlabench.config import RunConfig
from vlabench.measure.correctness import TOLERANCES, compare
from vlabench.models.replicas import build_replica
from vlabench.results.aggregate import load_results, results_frame
from vlabench.results.schema import write_result
from vlabench.vocab import Precision


class SkewedBackend(TorchBackend):
    """Eager torch with a 10% larger output projection: fast to build, and wrong."""

    name = "torch-skewed"

    def prepare(self, spec, workload, device, precision, seed):
        model = build_replica(spec, seed, Precision.DTYPES[precision], device)
        with torch.no_grad():
            model.action_out_proj.weight.mul_(1.1)
        return TorchPolicy(model, device)


def test_compare_gates_the_denoised_displacement_not_the_shared_noise():
    noise = torch.tensor([3.0, -3.0, 3.0, -3.0])
    reference = noise + torch.tensor([0.1, -0.2, 0.4, 0.0])
    exact = compare(reference.clone(), reference, noise, "fp32")
    assert exact.passed and exact.max_abs_error == 0 and exact.displacement_cosine == pytest.approx(1.0)
    nudged = compare(reference + torch.tensor([0.0, 0.0, 0.01, 0.0]), reference, noise, "fp16")
    assert nudged.relative_error == pytest.approx(0.025, rel=1e-4) and nudged.passed
    assert not compare(reference + torch.tensor([0.0, 0.0, 0.02, 0.0]), reference, noise, "fp32").passed
    # Returning the noise untouched keeps whole-chunk cosine near 1 but fails the gate.
    lazy = compare(noise.clone(), reference, noise, "bf16")
    assert lazy.cosine > 0.99 and not lazy.passed
    assert not compare(torch.tensor([1.0, float("nan"), 4.0, 0.0]), reference, noise, "bf16").passed
    assert TOLERANCES["fp32"].max_relative_error < TOLERANCES["fp16"].max_relative_error


def test_a_wrong_backend_is_marked_invalid_and_never_ranked(fast_run, tmp_path):
    good = plan_run(RunConfig(model="smolvla-tiny", backend="onnxruntime", **fast_run.fields()))
    bad = plan_run(RunConfig(model="smolvla-tiny", backend="torch", **fast_run.fields()))
    object.__setattr__(bad, "backend", SkewedBackend())
    ok_result, bad_result = execute_many([good, bad])
    assert ok_result.valid and ok_result.correctness.relative_error < 1e-5
    assert not bad_result.valid and bad_result.correctness.relative_error > 0.05
    assert any(w.startswith("INVALID") for w in bad_result.warnings)
    for result in (ok_result, bad_result):
        write_result(result, tmp_path)
    frame = rank(results_frame(load_results([tmp_path])[0], control_hz=1), "time", control_hz=1)
    by_backend = frame.set_index("backend")
    assert by_backend.loc["onnxruntime", "feasible"] and by_backend.loc["onnxruntime", "rank"] == 1
    assert not by_backend.loc["torch-skewed", "feasible"]
    assert "correctness" in by_backend.loc["torch-skewed", "reasons"]


# torch-compile is in "all" for the first model only: its gate on pi0-tiny and pi05-tiny is test_torch_compile_backend's
BACKENDS_PER_MODEL = {
    "smolvla-tiny": "all",
    "pi0-tiny": "torch,onnxruntime,openvino",
    "pi05-tiny": "torch,onnxruntime,openvino",
}


def test_every_backend_here_passes_the_gate_on_every_tiny_model_in_one_command(fast_run, tmp_path):
    for model, backends in BACKENDS_PER_MODEL.items():
        args = ["run", "--model", model, "--backend", backends, "--json", "--out", str(tmp_path / model)]
        result = CliRunner().invoke(app, [*args, *fast_run.args()])
        assert result.exit_code == 0, result.output
        runs = json.loads(result.stdout)
        backends = {run["backend"] for run in runs}
        assert {"torch", "onnxruntime"} <= backends
        for run in runs:
            assert run["backend"] == "torch" or run["correctness"]["passed"], run["backend"]
