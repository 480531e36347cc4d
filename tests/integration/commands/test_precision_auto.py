"""``--precision auto``: the candidates are the backend's precisions the hardware runs natively, each is probed with a
short gated run, the fastest passing one is kept (never one that fails the gate), and the choice is printed and
recorded in the result."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import vlabench.commands.run.precision_auto as precision_auto
from vlabench.backends import BACKENDS
from vlabench.backends.torch.backend import TorchBackend, TorchPolicy
from vlabench.cli.app import app
from vlabench.commands.run import plan_run
from vlabench.commands.run.precision_auto import ProbedPrecision, candidates, native_reason, pick
from vlabench.config import RunConfig
from vlabench.results.schema import load_result

runner = CliRunner()


class ShortcutPolicy(TorchPolicy):
    """Skips the action expert: a zero velocity, so the chunk is the noise. The fastest there is, and wrong."""

    def denoise_step(self, x_t, t, cache):
        return torch.zeros_like(x_t)


class ShortcutBackend(TorchBackend):
    """Eager torch, except that at bf16 it skips the action expert."""

    name = "shortcut"

    def precisions(self, device):
        return ("fp32", "bf16")

    def prepare(self, spec, workload, device, precision, seed):
        policy = super().prepare(spec, workload, device, precision, seed)
        return ShortcutPolicy(policy.model, device) if precision == "bf16" else policy


def test_native_precisions_follow_the_cpu_flags():
    assert native_reason("fp32", "cpu", set()) is None
    assert native_reason("bf16", "cpu", {"amx_bf16"}) is None and native_reason("bf16", "cpu", {"avx512_bf16"}) is None
    assert "emulated" in native_reason("bf16", "cpu", {"avx512f", "avx512_vnni"})
    assert native_reason("int8", "cpu", {"avx512_vnni"}) is None and native_reason("int8", "cpu", {"amx_int8"}) is None
    assert native_reason("int8", "cpu", {"avx2", "fma"}) is None  # VPMADDUBSW: the AVX2 int8 product
    assert "amx_int8" in native_reason("int8", "cpu", {"sse4_2", "avx"})
    assert native_reason("fp16", "cpu", {"avx512_fp16"}) is None and native_reason("fp16", "cpu", {"amx_bf16"})


def test_the_candidates_are_the_backends_native_precisions_fp32_first():
    plan = plan_run(RunConfig(model="smolvla-tiny", precision="auto", energy_meter="none"))
    assert plan.precision == "fp32" and plan.config.precision == "auto"  # planned at the largest footprint
    probe, skipped = candidates(plan, flags=set())
    declared = TorchBackend().precisions(torch.device("cpu"))
    assert probe == ["fp32"] and {s.precision for s in skipped} == set(declared) - {"fp32"}
    assert all("not native on this CPU" in s.note for s in skipped)
    probe, skipped = candidates(plan, flags={"amx_bf16", "amx_int8"})
    assert probe[:2] == ["fp32", "bf16"] and "fp16" not in probe
    assert "fp16" in {s.precision for s in skipped}


def entry(precision: str, ms: float, gate: str = "passed") -> ProbedPrecision:
    return ProbedPrecision(precision=precision, e2e_p50_ms=ms, gate=gate)


def test_pick_keeps_the_fastest_passing_unless_a_more_precise_one_is_as_fast():
    assert pick([entry("fp32", 30, "reference"), entry("bf16", 10)])[0] == "bf16"
    assert pick([entry("fp32", 30, "reference"), entry("bf16", 10, "failed"), entry("int8", 20)])[0] == "int8"
    chosen, reason = pick([entry("fp32", 10.2, "reference"), entry("bf16", 10.0)])
    assert chosen == "fp32" and "within 5%" in reason
    assert pick([entry("fp32", 30, "failed"), entry("bf16", 10, "failed")]) == (
        "fp32",
        "no candidate passed the correctness gate: fp32, the reference precision",
    )
    assert "3.00x as fast as the next, fp32" in pick([entry("fp32", 30, "reference"), entry("bf16", 10)])[1]


@pytest.mark.parametrize("flags", [{"amx_bf16"}], ids=["amx"])
def test_auto_never_keeps_a_precision_that_fails_the_gate_and_records_why(fast_run, tmp_path, monkeypatch, flags):
    monkeypatch.setitem(BACKENDS, "shortcut", ShortcutBackend)
    monkeypatch.setattr(precision_auto, "read_cpu_flags", lambda: flags)
    args = ["run", "-m", "smolvla-tiny", "-b", "shortcut", "--precision", "auto", "--json", "-o", str(tmp_path)]
    result = runner.invoke(app, [*args, *fast_run.args()])
    assert result.exit_code == 0, result.output
    assert "shortcut: precision auto → fp32" in " ".join(result.output.split())
    run = json.loads(result.stdout)
    choice = run["backend_details"]["precision_choice"]
    by_precision = {c["precision"]: c for c in choice["candidates"]}
    assert by_precision["bf16"]["gate"] == "failed" and by_precision["fp32"]["gate"] == "passed"
    assert all(c["e2e_p50_ms"] > 0 for c in choice["candidates"])
    assert run["precision"] == choice["chosen"] == "fp32" and run["correctness"]["passed"]
    saved = load_result(next(tmp_path.glob("*.json")))
    assert saved.config.precision == "fp32" and saved.backend_details["precision_choice"] == choice


def test_auto_keeps_a_passing_reduced_precision_on_the_reference_backend(fast_run, tmp_path, monkeypatch):
    monkeypatch.setattr(precision_auto, "read_cpu_flags", lambda: {"amx_bf16"})
    monkeypatch.setattr(precision_auto, "pick", lambda probed: ("bf16", "forced for the test"))
    args = ["run", "-m", "smolvla-tiny", "--precision", "auto", "--json", "-o", str(tmp_path)]
    result = runner.invoke(app, [*args, *fast_run.args()])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    choice = run["backend_details"]["precision_choice"]
    gates = {c["precision"]: c["gate"] for c in choice["candidates"]}
    assert gates["fp32"] == "reference" and gates["bf16"] == "passed" and gates["fp16"] == "skipped"
    assert run["precision"] == "bf16" and run["correctness"]["passed"]  # the run itself is gated at bf16 too
