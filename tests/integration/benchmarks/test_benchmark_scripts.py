"""The benchmark scripts' own logic: the backends benchmark's CPU classes and target verdicts, and the expert
profile's operator classes, checked on a tiny model with real profilers."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.benchmarks import BENCHMARKS, load
from vlabench.backends import BACKENDS, BackendOptions
from vlabench.kernels.ceilings import MeasuredCeiling
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload

backends = load("backends")
expert_profile = load("expert_profile")


def record(variant: str, speedup: float, valid: bool, share: float | None = None) -> dict:
    return {"variant": variant, "speedup_vs_torch_fp32": speedup, "valid": valid, "expert_share_of_floor": share}


@pytest.mark.parametrize(
    ("flags", "kind"),
    [({"amx_bf16", "avx512_bf16"}, "amx"), ({"avx512_bf16"}, "avx512-bf16"), ({"avx2"}, "no-native-bf16")],
)
def test_cpu_class_follows_the_native_bf16_flags(flags, kind):
    assert backends.cpu_class(flags) == kind


def test_the_verdict_takes_the_fastest_variant_that_passes_the_gate():
    records = [
        record("torch fp32", 1.0, True, 0.3),
        record("openvino int8", 5.0, False, 0.9),  # fastest, but outside the gate: never the best
        record("openvino bf16", 4.6, True, 0.5),
    ]
    verdict = backends.verdict(records, "amx")
    assert verdict["best_variant"] == "openvino bf16" and verdict["speedup_met"]
    assert verdict["expert_share_of_floor"] == 0.5 and not verdict["expert_share_met"]
    assert not backends.verdict(records[:1], "no-native-bf16")["speedup_met"]
    assert backends.verdict([record("torch fp32", 1.0, False)], "amx")["checked"] is False


def test_a_share_above_the_floor_counts_toward_no_target():
    """No step beats its roofline floor: a share above 100% means a ceiling was read low in that run."""
    records = [record("torch fp32", 1.0, True, 0.3), record("openvino fp32", 4.6, True, 1.07)]
    verdict = backends.verdict(records, "amx")
    assert verdict["expert_share_beats_floor"] and not verdict["expert_share_met"]
    assert backends.verdict([record("openvino fp32", 4.6, True, 0.61)], "amx")["expert_share_met"]
    assert [backends.beats_its_floor(share) for share in (None, 0.99, 1.0, 1.01)] == [False, False, False, True]


@pytest.mark.parametrize(
    ("op", "kind"),
    [
        ("aten::linear", "weight matmuls"),
        ("aten::_weight_int4pack_mm_for_cpu", "weight matmuls"),
        ("vlabench::amx_int8_linear", "weight matmuls"),
        ("vlabench::amx_int8_gated_linear", "weight matmuls"),  # a gated MLP's gate and up in one call
        ("aten::scaled_dot_product_attention", "attention"),
        ("vlabench::amx_attention", "attention"),
        ("vlabench::avx512_attention", "attention"),
        ("aten::repeat_interleave", "K/V expansion (GQA)"),
        ("aten::add", "norms, activations, RoPE, residuals"),
        # a compiled step: Inductor's kernels are pointwise whatever they feed; its extern calls keep their class
        ("graph_2_cpp_fused_silu_view_vnni_int8_linear_2", "norms, activations, RoPE, residuals"),
        ("graph_0_cpp_fused__to_copy_add_arange_avx512_attention_4", "norms, activations, RoPE, residuals"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("mkldnn::_linear_pointwise", "weight matmuls"),
        ("mkl::_mkl_linear", "weight matmuls"),
        ("aten::mm", "weight matmuls"),  # a linear lowered by Inductor (eager's are aten::linear, mm inside)
        ("aten::addmm", "weight matmuls"),
        ("aoti_torch_cpu__mkl_linear", "weight matmuls"),  # the same calls from Inductor's C++ wrapper
        ("aoti_torch_cpu_addmm", "weight matmuls"),
        ("aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu", "attention"),
    ],
)
def test_torch_ops_land_in_their_class(op, kind):
    assert expert_profile.torch_class(op) == kind


def ceilings(gbs: float) -> list[MeasuredCeiling]:
    """A given fp32 GEMM peak (1 TFLOP/s) and memory bandwidth, as a run measures them once."""
    return [
        MeasuredCeiling(quantity="gemm_fp32", value=1.0, unit="TFLOP/s", repetitions=1, detail="given"),
        MeasuredCeiling(quantity="memory_bandwidth", value=gbs, unit="GB/s", repetitions=1, detail="given"),
    ]


def test_a_profiled_tiny_step_splits_into_classes_that_add_up_to_the_step():
    torch.set_num_threads(1)
    args = argparse.Namespace(seed=0, timed_steps=3, profiled_steps=2)
    spec = load_model_spec("smolvla-tiny")
    found = expert_profile.profile_variant("torch", "fp32", args, spec, Workload.from_spec(spec), ceilings(20.0))
    classes = found["classes"]
    assert set(classes) == set(expert_profile.CLASSES)
    assert classes["weight matmuls"]["ms"] > 0 and classes["attention"]["ms"] > 0
    assert sum(entry["ms"] for entry in classes.values()) == pytest.approx(found["profiled_step_ms"], rel=1e-6)
    assert classes["weight matmuls"]["floor_ms"] > 0 and 0 < found["step_floor_ms"] < found["step_p50_ms"]
    floored = classes["weight matmuls"]["ms"] + classes["attention"]["ms"]
    assert found["floored_ops_ms"] == pytest.approx(floored)  # the bound: only the ops the floor counts


@pytest.mark.parametrize("precision", ["fp32", "bf16"])  # linears as mkl calls (fp32) or mm / addmm (bf16)
def test_a_profiled_compiled_step_counts_inductors_kernels_and_its_extern_calls(precision):
    torch.set_num_threads(1)
    args = argparse.Namespace(seed=0, timed_steps=3, profiled_steps=2)
    spec = load_model_spec("smolvla-tiny")
    torch._dynamo.reset()  # the other precision's compile of the same replica code would count as a recompile
    with torch._dynamo.config.patch(error_on_recompile=True):  # the step profiled is the one prepare compiled
        found = expert_profile.profile_variant(
            "torch-compile", precision, args, spec, Workload.from_spec(spec), ceilings(20.0)
        )
    classes = found["classes"]
    assert found["profiler"] == "torch.profiler (CPU), Inductor kernels profiled"
    assert classes["norms, activations, RoPE, residuals"]["ms"] > 0  # the generated kernels, recorded
    assert classes["weight matmuls"]["ms"] > 0 and classes["attention"]["ms"] > 0
    assert sum(entry["ms"] for entry in classes.values()) == pytest.approx(found["profiled_step_ms"], rel=1e-6)
    assert sum(entry["ms"] for kind, entry in classes.items() if kind != "outside the ops") < found["profiled_step_ms"]


def test_every_variants_floor_rests_on_the_runs_one_bandwidth():
    """The weight matmuls' floor follows the ceilings the run measured once (memory-bound at these bandwidths: 50 rows
    at fp32 is 25 FLOP per byte), not a fresh measurement per variant."""
    spec = load_model_spec("smolvla-tiny")
    workload = Workload.from_spec(spec)
    slow, fast = (expert_profile.floors(spec, workload, "fp32", 100.0, ceilings(gbs)) for gbs in (0.5, 1.0))
    assert slow["weight matmuls"] == pytest.approx(2 * fast["weight matmuls"], rel=0.05)


def test_every_variants_expert_share_rests_on_the_benchmarks_one_measurement(fast_run):
    """``backends.py`` measures the ceilings once and puts every variant's step on them: a variant's share follows the
    ceilings given, whatever the run itself measured (each run used to measure its own, on a drifting host)."""
    from vlabench.commands.run import execute_many, plan_run

    config = fast_run.config(model="smolvla-tiny", warmup=None, threads=None)
    result = execute_many([plan_run(config)])[0]
    slow, fast = (backends.expert_share(result, ceilings(gbs)) for gbs in (0.5, 1.0))
    assert 0 < fast < slow and slow == pytest.approx(2 * fast, rel=0.05)  # memory-bound: the floor halves
    assert backends.expert_share(result, []) is None  # --no-ceilings: no share, never a datasheet guess
    record = backends.record(result, result.timing.phases["e2e"].p50, ceilings(1.0))
    assert record["expert_share_of_floor"] == fast and record["speedup_vs_torch_fp32"] == 1.0


class FakePlan:
    """A plan with a footprint: only what ``check_fit_together`` reads."""

    def __init__(self, name: str, gib: float) -> None:
        from vlabench.analysis.memory import estimate_footprint

        spec = load_model_spec("smolvla-tiny")
        self.name, self.spec, self.precision = name, spec, "fp32"
        footprint = estimate_footprint(spec, Workload.from_spec(spec), "fp32", "torch", 10)
        self.footprint = footprint.model_copy(update={"total_bytes": int(gib * 2**30)})
        self.device = argparse.Namespace(torch_device=torch.device("cpu"))

    def __repr__(self) -> str:
        return self.name


def test_variants_that_do_not_fit_together_run_in_groups_each_led_by_the_baseline(monkeypatch):
    from vlabench.analysis import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: 10 * 2**30)
    plans = [FakePlan("eager", 2), FakePlan("a", 3), FakePlan("b", 3), FakePlan("c", 3), FakePlan("huge", 9)]
    groups = backends.fitting_groups(plans)
    assert [[p.name for p in group] for group in groups] == [["eager", "a", "b"], ["eager", "c"], ["huge"]]
    assert backends.fitting_groups(plans[:3]) == [plans[:3]]  # fits whole: one group


@pytest.mark.parametrize(
    ("op_type", "name", "kind"),
    [
        ("FullyConnected", "/layers.0/mlp/up_proj/MatMul", "weight matmuls"),
        ("FullyConnectedQuantizedLegacy", "/layers.0/mlp/gate_proj/MatMul/DequantizationMultiply", "weight matmuls"),
        ("Subgraph", "/layers.1/MatMul_1", "attention"),  # the CPU plugin's fused attention
        ("Subgraph", "/layers.1/Add_2", "norms, activations, RoPE, residuals"),
        ("Tile", "/layers.2/Tile", "K/V expansion (GQA)"),
        ("Transpose", "/layers.2/Transpose_3", "layout and precision conversions"),
    ],
)
def test_openvino_nodes_land_in_their_class(op_type, name, kind):
    assert expert_profile.openvino_class(op_type, name, {"/layers.1/MatMul_1"}) == kind


def test_an_openvino_step_counts_only_the_profiled_steps():
    """The node events counted are those of the profiled steps alone (not the prefix, the warm-up or the timed steps
    recorded before them): two profiled steps count about twice the events one step records (OpenVINO's profiler
    reports a varying few nodes per call, 50 to 57 seen), far from the eight or more steps recorded in all; every
    class of the step has time."""
    pytest.importorskip("openvino")
    torch.set_num_threads(1)
    spec = load_model_spec("smolvla-tiny")
    workload = Workload.from_spec(spec)
    backend = BACKENDS["openvino"].from_options(BackendOptions(profile_nodes=True))
    policy = backend.prepare(spec, workload, expert_profile.CPU, "fp32", 0)
    x_t, t, cache = expert_profile.step_inputs(policy, spec, workload, "fp32", 0)
    expert_profile.timed_steps(policy, x_t, t, cache, 3)
    recorded = len(policy.node_events())
    policy.denoise_step(x_t, t, cache)
    one = sum(event.graph == "denoise" for event in policy.node_events()[recorded:])
    classes, _, two = expert_profile.profile_runtime(policy, x_t, t, cache, 2, "denoise")
    assert one > 0 and 1.5 * one <= two <= 2.5 * one
    assert classes["attention"] > 0 and classes["weight matmuls"] > 0


@pytest.mark.parametrize("text", ["torch", "torch:fp64", "tensort:fp32", "openvino:"])
def test_a_malformed_variant_is_a_usage_error_naming_the_valid_parts(text):
    with pytest.raises(argparse.ArgumentTypeError, match="backend among torch, torch-compile"):
        backends.variant_name(text)


def test_a_variant_option_is_checked_named_and_run_beside_the_plain_pair():
    assert backends.variant_name("torch-compile:int8+fuse-expert-kv") == "torch-compile:int8+fuse-expert-kv"
    parsed = backends.parse_variant("torch-compile:int8+fuse-expert-kv")
    assert parsed == ("torch-compile", "int8", ("fuse-expert-kv",))
    assert backends.option_settings(parsed[2]) == {"fuse_expert_kv": True}
    assert backends.enabled_options(argparse.Namespace(fuse_expert_kv=True)) == ("fuse-expert-kv",)
    assert backends.enabled_options(argparse.Namespace(fuse_expert_kv=False)) == ()
    assert backends.enabled_options(None) == ()  # a result without an optimization block
    with pytest.raises(argparse.ArgumentTypeError, match=r"no variant option 'turbo' \(the options are \+fuse-expert"):
        backends.variant_name("torch:fp32+turbo")
    chosen, _ = backends.variants(["torch:fp32", "torch:fp32+fuse-expert-kv"])
    assert chosen == [("torch", "fp32", ()), ("torch", "fp32", ("fuse-expert-kv",))]
    assert backends.variant_label("torch", "fp32", ("fuse-expert-kv",)) == "torch fp32 +fuse-expert-kv"
    assert expert_profile.profiled_variant("torch-compile:int8+fuse-expert-kv")
    with pytest.raises(argparse.ArgumentTypeError, match="applies to torch, torch-compile"):
        expert_profile.profiled_variant("openvino:int8+fuse-expert-kv")


def test_a_fused_variant_is_labelled_and_its_floor_leaves_out_the_hoisted_projections(fast_run):
    """A run with +fuse-expert-kv is its own variant (never the baseline), and its step's floor is the hoisted one:
    below the plain step's, as the prefix K/V projections moved to the prefill."""
    from vlabench.commands.run import execute_many, plan_run

    config = fast_run.config(model="smolvla-tiny", warmup=None, threads=None)
    result = execute_many([plan_run(config.model_copy(update={"fuse_expert_kv": True}))])[0]
    fused = backends.record(result, result.timing.phases["e2e"].p50, ceilings(1.0))
    assert fused["variant"] == "torch fp32 +fuse-expert-kv" and fused["options"] == ["fuse-expert-kv"]
    assert not backends.is_baseline(result)
    spec, step = load_model_spec("smolvla-tiny"), result.timing.phases["denoise_step"].p50
    plain = backends.step_roofline(spec, result.workload, "fp32", step, ceilings(1.0)).phases
    plain_share = next(p for p in plain if p.phase == "denoise_step").share_of_attainable
    assert 0 < fused["expert_share_of_floor"] < plain_share
    torch.set_num_threads(1)
    args = argparse.Namespace(seed=0, timed_steps=2, profiled_steps=1)
    profiled = [
        expert_profile.profile_variant("torch", "fp32", args, spec, Workload.from_spec(spec), ceilings(20.0), options)
        for options in ((), ("fuse-expert-kv",))
    ]
    assert [found["variant"] for found in profiled] == ["torch fp32", "torch fp32 +fuse-expert-kv"]
    floors = [found["classes"]["weight matmuls"]["floor_ms"] for found in profiled]
    assert 0 < floors[1] < floors[0]


def test_the_expert_profile_takes_only_the_backends_whose_profiler_it_reads():
    assert expert_profile.profiled_variant("openvino:int8") == "openvino:int8"
    with pytest.raises(argparse.ArgumentTypeError, match="only torch, torch-compile, openvino"):
        expert_profile.profiled_variant("onnxruntime:fp32")


def test_a_requested_variant_the_backend_does_not_offer_is_listed_as_skipped():
    chosen, skipped = backends.variants(["torch:fp32", "onnxruntime:bf16"])
    assert chosen == [("torch", "fp32", ())]
    assert any(reason.startswith("onnxruntime bf16:") for reason in skipped)


def test_the_kernel_linear_benchmark_times_the_path_that_runs_and_renders_it(tmp_path):
    """``amx_linear.py`` times the first kernel path this CPU runs against torchao, keys its numbers by that path,
    and the docs block renders them; a path the CPU lacks is refused with the reason (exit 3)."""
    pytest.importorskip("torchao")
    from vlabench.kernels import amx_int8

    runnable = [isa for isa in amx_int8.ISAS if amx_int8.unavailable_reason(isa) is None]
    if not runnable:
        pytest.skip(f"no int8 kernel path runs here: {amx_int8.unavailable_reason('vnni')}")
    amx_linear = load("amx_linear")
    out = tmp_path / "results" / "linear.json"
    out.parent.mkdir()
    args = ["--model", "smolvla-tiny", "--calls", "3", "--repeats", "1", "--cold-mib", "0.5", "--json-out", str(out)]
    assert amx_linear.main(args) == 0
    doc = __import__("json").loads(out.read_text())
    kernel = runnable[0]
    assert doc["kernel"] == kernel and doc["shapes"]
    for shape in doc["shapes"]:
        assert set(shape["ms"]) == {f"{kernel} hot", f"{kernel} cold", "torchao hot", "torchao cold"}
        assert shape[f"{kernel}_top_s"]["cold"] > 0
    render_docs = load("render_docs")
    sidecar = BENCHMARKS / "results" / "amx-linear-smolvla-cpu.meta.json"  # a real sidecar, for the caption
    (out.parent / "linear.meta.json").write_text(sidecar.read_text())
    text = render_docs.render_amx_linear(tmp_path, "results/linear.json")
    assert f"{kernel} cold ms" in text and f"{doc['shapes'][0]['rows']}×" in text
    missing = next((isa for isa in amx_int8.ISAS if isa not in runnable), None)
    if missing:
        assert amx_linear.main(["--path", missing, "--model", "smolvla-tiny"]) == 3


CAPTURE = [sys.executable, str(BENCHMARKS / "capture.py")]


def capture(tmp_path: Path, printed: str, *options: str) -> tuple[subprocess.CompletedProcess, Path]:
    artifact = tmp_path / "results" / "artifact.json"
    command = [sys.executable, "-c", f"print({printed!r})"]
    done = subprocess.run(
        [*CAPTURE, "--artifact", str(artifact), *options, "--stdout", "--", *command],
        text=True,
        capture_output=True,
        timeout=120,
    )
    return done, artifact


def test_capture_writes_the_artifact_and_its_sidecar(tmp_path):
    done, artifact = capture(tmp_path, '{"p50_ms": 1.5}', "--note", "a sentence")
    assert done.returncode == 0, done.stderr
    assert artifact.read_text() == '{\n  "p50_ms": 1.5\n}\n'
    meta = json.loads(artifact.with_name("artifact.meta.json").read_text())
    assert meta["exit_code"] == 0 and meta["note"] == "a sentence" and "print(" in meta["command"]
    assert sorted(p.name for p in artifact.parent.iterdir()) == ["artifact.json", "artifact.meta.json"]


def test_capture_records_the_tree_as_it_was_before_the_command(tmp_path):
    """Re-capturing a committed artifact overwrites a tracked file: the sidecar still says the code ran from a clean
    tree, and says dirty when a tracked file was changed before the run."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(BENCHMARKS / "capture.py", repo / "benchmarks" / "capture.py")
    artifact = repo / "artifact.json"
    artifact.write_text("{}\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "artifact"], check=True)

    def run(value: int) -> dict:
        command = [sys.executable, "-c", f"print('{{\"p50_ms\": {value}}}')"]
        capture = [sys.executable, str(repo / "benchmarks" / "capture.py"), "--artifact", str(artifact)]
        done = subprocess.run([*capture, "--stdout", "--", *command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(artifact.with_name("artifact.meta.json").read_text())

    assert run(1)["git_dirty"] is False  # the artifact changed during the run, the code did not
    subprocess.run([*git, "checkout", "-q", "--", "artifact.json"], check=True)
    (repo / "benchmarks" / "capture.py").write_text((repo / "benchmarks" / "capture.py").read_text() + "\n")
    assert run(2)["git_dirty"] is True


@pytest.mark.parametrize("printed", ['{"p50_ms": NaN}', '{"p50_ms": Infinity}', "not json"])
def test_capture_refuses_output_that_is_not_strict_json_and_leaves_nothing(tmp_path, printed):
    done, artifact = capture(tmp_path, printed)
    assert done.returncode == 1 and "not strict JSON" in done.stderr and "Traceback" not in done.stderr
    assert list(artifact.parent.iterdir()) == []  # no artifact, no sidecar, no temporary file


def test_benchmark_artifacts_are_written_atomically():
    """Every script that writes a committed artifact or a document goes through vlabench.atomic (a killed run leaves
    the previous file whole); site_scale.py writes its throwaway corpus into a temporary folder."""
    plain = [path.name for path in BENCHMARKS.glob("*.py") if ".write_text(" in path.read_text()]
    assert plain == ["site_scale.py"]
