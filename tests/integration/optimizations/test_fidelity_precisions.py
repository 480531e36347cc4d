"""`vlabench fidelity --closed-loop-precisions`: the trained closed-loop policy at bf16, int8, fp8 and int4 (int8/int4
through the torch backend's own CPU quantizers) on the same seeded episodes and noise as the exact fp32 path."""

import importlib.util
import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import vlabench.backends.torch.quantize as torch_quantize
import vlabench.optimizations.closed_loop.train as train_module
from vlabench.cli.app import app
from vlabench.kernels import amx_int8
from vlabench.kernels.amx_int8 import Int8Linear
from vlabench.measure.action_loops import EulerLoop
from vlabench.optimizations.closed_loop import TrainConfig, success_rate
from vlabench.optimizations.closed_loop.precision import (
    PRECISIONS,
    parse_precisions,
    policy_at,
    precision_success_rates,
)
from vlabench.optimizations.closed_loop.train import build_policy, train
from vlabench.optimizations.fidelity import FidelityVariant

pytest.importorskip("gymnasium")
needs_torchao = pytest.mark.skipif(torch_quantize.torchao_missing() is not None, reason="int8/int4 need torchao")

# width 32: the smallest width whose expert layers the int4 CPU kernel takes (input widths in multiples of 32)
SMALL = TrainConfig(
    demo_episodes=4, width=32, heads=2, layers=1, prefix_tokens=2, mlp_ratio=1, train_steps=40, batch_size=32
)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def policy():
    return train(SMALL)[0]


def chunk(policy, obs, noise):
    """The exact loop's actions for one observation, at the policy's input dtype, as fp32."""
    dtype = policy.obs_mean.dtype
    with torch.inference_mode():
        cache = policy.prefix(obs.to(dtype))
        return EulerLoop(policy.steps, 1, CPU).sample(policy, cache, noise.to(dtype)).float()


@pytest.mark.parametrize(
    "precision, tolerance",
    [
        ("bf16", 0.05),
        pytest.param("int8", 0.05, marks=needs_torchao),
        pytest.param("fp8", 0.1, marks=needs_torchao),
        pytest.param("int4", 0.25, marks=needs_torchao),
    ],
)
def test_each_precision_acts_close_to_fp32_but_not_identically(policy, precision, tolerance):
    generator = torch.Generator().manual_seed(3)
    obs, noise = torch.randn(1, 10, generator=generator), torch.randn(1, 8, 2, generator=generator)
    exact = chunk(policy, obs, noise)
    reduced = chunk(policy_at(policy, precision).policy, obs, noise)
    assert not torch.equal(reduced, exact), f"{precision} computed exactly the fp32 actions: not reduced"
    assert ((reduced - exact).norm() / exact.norm()).item() < tolerance


@needs_torchao
def test_quantized_policies_hold_the_backends_quantized_modules(policy):
    linears = {name for name, module in policy.named_modules() if isinstance(module, nn.Linear)}
    int8 = policy_at(policy, "int8")
    int8_scheme = torch_quantize.choose_int8_scheme(CPU, None)[0]  # vlabench's kernel where it runs, else torchao
    quantized = {
        name
        for name, module in int8.policy.named_modules()
        if isinstance(module, Int8Linear)
        or (isinstance(module, nn.Linear) and isinstance(module.weight, torch_quantize_base_tensor()))
    }
    assert quantized == set(int8.quantized_linears) == linears  # the int8 scheme takes every Linear here
    assert int8.scheme == torch_quantize.scheme(CPU, "int8", int8_scheme) and not int8.float_linears

    int4 = policy_at(policy, "int4")
    packed = {n for n, m in int4.policy.named_modules() if isinstance(m, torch_quantize.Int4PackedLinear)}
    assert packed == set(int4.quantized_linears) and len(packed) == len(linears) - 3
    assert int4.float_linears == ("action_in", "action_out", "obs_in")  # 10- and 2-wide: no int4 group fits
    assert all(type(int4.policy.get_submodule(name)) is nn.Linear for name in int4.float_linears)
    assert int4.scheme == torch_quantize.scheme(CPU, "int4").replace("groups of 128", "groups of 32")

    fp8 = policy_at(policy, "fp8")
    cast = {n for n, m in fp8.policy.named_modules() if isinstance(m, torch_quantize.CastLinear)}
    assert cast == set(fp8.quantized_linears) == linears and not fp8.float_linears  # e4m3 takes every shape
    assert fp8.scheme == torch_quantize.scheme(CPU, "fp8")
    assert all(fp8.policy.get_submodule(n).inner.weight.qdata.dtype == torch.float8_e4m3fn for n in cast)

    bf16 = policy_at(policy, "bf16")
    assert {p.dtype for p in bf16.policy.parameters()} | {b.dtype for b in bf16.policy.buffers()} == {torch.bfloat16}
    assert all(type(m) is nn.Linear for n, m in policy.named_modules() if n in linears)  # the original is untouched
    assert {p.dtype for p in policy.parameters()} == {torch.float32}


def torch_quantize_base_tensor():
    from torchao.utils import TorchAOBaseTensor

    return TorchAOBaseTensor


@needs_torchao
def test_fidelity_rows_at_each_precision_run_the_exact_rows_episodes(policy, monkeypatch, tmp_path):
    monkeypatch.setattr(train_module, "load_or_train", lambda seed=0, *args, **kwargs: policy)
    args = ["fidelity", "--model", "smolvla-tiny", "--observations", "1", "--episodes", "2", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--closed-loop-precisions", "int4, int8", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["schema_version"] == "1.3" and report["closed_loop_precisions"] == ["int8", "int4"]
    rows = {row["variant"]: row for row in report["closed_loop"]}
    names = [row["variant"] for row in report["closed_loop"]]
    assert names[:4] == ["scripted expert", "exact", "exact int8", "exact int4"]
    assert rows["exact"]["precision"] == "fp32" and rows["scripted expert"]["precision"] is None
    for precision in ("int8", "int4"):
        row = rows[f"exact {precision}"]
        expected = torch_quantize.scheme(CPU, precision, torch_quantize.choose_int8_scheme(CPU, None)[0])
        assert row["precision"] == precision and row["scheme"].startswith(expected[:20])
        assert row["episodes"] == rows["exact"]["episodes"] == 2 and row["expert_calls_per_chunk"] == 10
        # the same seeded episodes and noise as the fp32 row: success_rate's, with the same seed and chunking
        again = success_rate(policy_at(policy, precision).policy, FidelityVariant(name=f"exact {precision}"), 2, 0)
        assert (row["successes"], row["mean_final_distance_m"]) == (again.successes, again.mean_final_distance_m)
    exact = success_rate(policy, FidelityVariant(name="exact"), 2, 0)
    assert (rows["exact"]["successes"], rows["exact"]["mean_final_distance_m"]) == (
        exact.successes,
        exact.mean_final_distance_m,
    )
    assert rows["exact int4"]["float_linears"] == ["action_in", "action_out", "obs_in"]


def test_a_precision_that_cannot_run_is_skipped_with_the_reason(monkeypatch):
    narrow = build_policy(TrainConfig(width=16, heads=2, layers=1, prefix_tokens=2, mlp_ratio=1)).eval()
    monkeypatch.setattr(torch_quantize, "torchao_missing", lambda: "quantized torch runs need torchao: pip install x")
    monkeypatch.setattr(amx_int8, "unavailable_reason", lambda isa="amx": f"no {isa} here")  # else int8 runs anyway
    rows, skipped = precision_success_rates(narrow, PRECISIONS, episodes=1)
    assert [row.precision for row in rows] == ["bf16"] and rows[0].stats.variant == "exact bf16"
    assert skipped == [
        ("exact int8", "quantized torch runs need torchao: pip install x"),
        ("exact fp8", "quantized torch runs need torchao: pip install x"),
        ("exact int4", "quantized torch runs need torchao: pip install x"),
    ]
    if importlib.util.find_spec("torchao") is not None:
        monkeypatch.undo()
        _, skipped = precision_success_rates(narrow, ["int4"], episodes=1)  # 16 wide: no int4 group fits
        assert skipped[0][0] == "exact int4" and "takes none of the policy's Linear layers" in skipped[0][1]


@pytest.mark.parametrize("value", ["int3", "fp32", "none,int8", ","])
def test_a_bad_precision_is_a_usage_error_naming_the_valid_ones(value, tmp_path):
    args = ["fidelity", "--model", "smolvla-tiny", "--closed-loop-precisions", value, "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "--closed-loop-precisions" in result.output and "Traceback" not in result.output
    assert "bf16, fp8, int4, int8" in " ".join(result.output.replace("│", " ").split())  # the panel wraps
    assert not list(tmp_path.iterdir())  # refused before any work


def test_precision_lists_are_canonical():
    assert parse_precisions("int4,BF16, int8,int4") == ("bf16", "int8", "int4")
    assert parse_precisions("none") == ()
