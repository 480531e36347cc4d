"""The projection model: its arithmetic, kernel counts per stack, honest leave-one-out, and ``vlabench project``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from vlabench.analysis import projection_cache, projection_score
from vlabench.analysis.kernel_counts import count_kernels, fused_count
from vlabench.analysis.operator_mix import MixStack, OperatorMix
from vlabench.analysis.projection_fit import (
    REFERENCE_HOST_GHZ,
    ClassShares,
    FittedParameters,
    HostModel,
    HostTerms,
    Observation,
    StackParameters,
    Term,
    _Design,
    fit,
    host_terms,
)
from vlabench.analysis.projection_inputs import entry_inputs, workload_for
from vlabench.analysis.projection_score import Inputs, project_phases, score_projections
from vlabench.analysis.projection_stacks import get_stack, parent_stack
from vlabench.analysis.reported import ReportedLatency
from vlabench.analysis.roofline import analyze, datasheet_ceiling
from vlabench.cli import app
from vlabench.hardware.devices import load_device_profile
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload

TINY = [
    "act-tiny",
    "diffusion-policy-tiny",
    "gr00t-n1.5-tiny",
    "gr00t-n1.6-tiny",
    "openvla-7b-tiny",
    "openvla-oft-tiny",
    "pi0-fast-tiny",
    "pi0-tiny",
    "pi05-tiny",
    "smolvla-tiny",
]


def entry(model: str, device: str, stack: str, ms: float, precision: str = "bf16") -> ReportedLatency:
    spec = load_model_spec(model)
    return ReportedLatency(
        model=model,
        device=device,
        precision=precision,
        cameras=spec.cameras,
        steps=Workload.from_spec(spec).steps,
        stack=stack,
        phases_ms={"e2e": ms},
        group=f"test source {model} {device}",
        source="test data, not a published figure",
    )


# Test data only: a small set of entries on tiny models, so fitting needs no full-size trace.
ENTRIES = [
    entry("smolvla-tiny", "rtx-4090", "pytorch-eager", 20.0),
    entry("pi0-tiny", "rtx-4090", "pytorch-eager", 25.0),
    entry("smolvla-tiny", "jetson-thor", "pytorch-eager", 50.0),
    entry("pi0-tiny", "jetson-thor", "pytorch-eager", 60.0),
    entry("pi0-tiny", "rtx-4090", "pytorch-compiled", 8.0),
    entry("smolvla-tiny", "jetson-thor", "pytorch-compiled", 20.0),
]


@pytest.fixture
def tiny_entries(monkeypatch):
    """Fit the model on ``ENTRIES`` instead of the published table (fast), and forget it afterwards."""
    monkeypatch.setattr(projection_score, "reported_latencies", lambda: ENTRIES)
    projection_score.fitted_model.cache_clear()
    projection_score.fitted_parameters.cache_clear()  # in-process: the next module fits its own entries
    yield ENTRIES
    projection_score.fitted_model.cache_clear()
    projection_score.fitted_parameters.cache_clear()  # in-process: the next module fits its own entries


def params(jetson: float = 1.0, core: float = 1.0, jetson_odds: float = 1.0) -> FittedParameters:
    """Parameters with a Jetson class factor ``jetson``, a cortex-a78ae core factor ``core``, clock slope 1, and the
    Jetson class's shares at ``jetson_odds`` times every stack's odds."""
    return FittedParameters(
        stacks={
            "pytorch-eager": StackParameters(
                share_of_peak=0.25, share_of_bandwidth=0.5, dispatch_us=10.0, fitted_on="x", observations=1
            ),
            "pytorch-compiled": StackParameters(
                share_of_peak=0.5, share_of_bandwidth=0.8, dispatch_us=4.0, fitted_on="x", observations=1
            ),
            "tensorrt": StackParameters(
                share_of_peak=0.5, share_of_bandwidth=0.8, dispatch_us=4.0, fitted_on="pytorch-compiled", observations=0
            ),
        },
        kernel_gflop=0.2,
        class_shares=ClassShares(
            share_logit={"jetson": math.log(jetson_odds)}, bandwidth_logit={"jetson": math.log(jetson_odds)}
        ),
        hosts=HostModel(
            class_effects={"jetson": math.log(jetson)},
            path_effects={},
            core_effects={"cortex-a78ae": math.log(core)},
            clock_slope=1.0,
        ),
        host_factor={},
        observations=["x"],
    )


THOR = HostTerms("jetson", "cuda")  # terms without a board CPU: the class factor alone


def test_a_phase_is_roofline_over_share_plus_kernels_times_dispatch_times_host_plus_device_time():
    # per phase one compute-bound operator (1 TFLOP = 10 ms at 100 TFLOP/s) and one memory-bound (1 GB = 1 ms at
    # 1000 GB/s), repeated 1, 2 and 4 times
    mixes = {
        phase: OperatorMix.of([1e12] * n + [0.0] * n, [0.0] * n + [1e9] * n, 100.0, 1000.0)
        for phase, n in (("vision", 1), ("prefill", 2), ("action", 4))
    }
    inputs = Inputs(
        mixes=mixes,
        peak_tflops=100.0,
        kernels={
            "eager": {"vision": 100, "prefill": 200, "action": 400, "e2e": 700},
            "fused": {"vision": 10, "prefill": 20, "action": 40, "e2e": 70},
        },
    )
    assert inputs.roofline_ms == pytest.approx(
        {"vision": 11.0, "prefill": 22.0, "prefix": 33.0, "action": 44.0, "e2e": 77.0}
    )
    eager = project_phases(inputs, params(jetson=3.0), "pytorch-eager", THOR)
    device_ms = 0.2 / 100.0  # kernel_gflop / peak: the device-side time of every kernel
    # compute-bound operators at the share of peak, memory-bound ones at the share of bandwidth
    assert eager.phases_ms["prefill"] == pytest.approx(20 / 0.25 + 2 / 0.5 + 200 * (10e-3 * 3.0 + device_ms))
    assert eager.phases_ms["e2e"] == pytest.approx(sum(eager.phases_ms[p] for p in ("vision", "prefill", "action")))
    assert eager.busy_share == pytest.approx((70 / 0.25 + 7 / 0.5 + 700 * device_ms) / eager.phases_ms["e2e"])
    compiled = project_phases(inputs, params(jetson=3.0), "pytorch-compiled", THOR)
    assert compiled.kernels["action"] == 40  # the fused count
    assert compiled.phases_ms["action"] == pytest.approx(40 / 0.5 + 4 / 0.8 + 40 * (4e-3 * 3.0 + device_ms))
    # a stack with no entry of its own says whose prior it took; a board CPU multiplies in its core and
    # (reference / clock)^slope
    nano = host_terms(load_device_profile("jetson-orin-nano-8gb"))
    other = project_phases(inputs, params(jetson=3.0, core=2.0), "tensorrt", nano)
    assert other.host_factor == pytest.approx(3.0 * 2.0 * REFERENCE_HOST_GHZ / nano.clock_ghz)
    assert "its parent pytorch-compiled's" in other.parameters_source
    assert "cortex-a78ae core 2" in other.parameters_source and "jetson class 3" in other.parameters_source
    # a phase run by another stack (GR00T's benchmark compiles only the action head) takes that stack's terms
    mixed = project_phases(inputs, params(jetson=3.0), "pytorch-compiled", THOR, {"prefix": "pytorch-eager"})
    assert mixed.phases_ms["prefill"] == pytest.approx(eager.phases_ms["prefill"])
    assert mixed.phases_ms["action"] == pytest.approx(compiled.phases_ms["action"])
    # a device class reaches its own shares: odds ×3 turn eager's 25% of peak into 50% and 50% of bandwidth into 75%,
    # on a Jetson only
    offset = project_phases(inputs, params(jetson=3.0, jetson_odds=3.0), "pytorch-eager", THOR)
    assert (offset.share_of_peak, offset.share_of_bandwidth) == pytest.approx((0.5, 0.75))
    assert offset.phases_ms["prefill"] == pytest.approx(20 / 0.5 + 2 / 0.75 + 200 * (10e-3 * 3.0 + device_ms))
    desktop = project_phases(inputs, params(jetson_odds=3.0), "pytorch-eager", HostTerms("desktop-gpu", "cuda"))
    assert desktop.phases_ms["prefill"] == pytest.approx(20 / 0.25 + 2 / 0.5 + 200 * (10e-3 + device_ms))


def test_a_stack_with_fp32_activations_runs_its_weightless_operators_at_the_fp32_peak():
    # vla.cpp's ggml keeps activations and attention in fp32: on an AGX Orin (bf16 peak 8x its fp32 peak) attention
    # takes 8x its bf16 compute time and moves twice the bytes; operators with weights are unchanged
    spec, workload = workload_for(load_model_spec("pi0"), 2, 10)
    operators = projection_cache.model_facts(spec, workload, "bf16").operators["prefill"]
    profile = load_device_profile("jetson-agx-orin-64gb")
    slowdown = profile.peak_tflops["bf16"].value / profile.peak_tflops["fp32"].value
    weighted = [(f, b) for f, b, w in operators if w]
    weightless = [(f, b) for f, b, w in operators if not w]
    assert sum(f for f, _ in weightless) > 0
    inputs = entry_inputs("pi0", "jetson-agx-orin-64gb", "bf16", 2, 10)
    wide = inputs.mix("prefill", "fp32")
    assert wide.cum_flops[-1] == pytest.approx(sum(f for f, _ in weighted) + slowdown * sum(f for f, _ in weightless))
    assert wide.cum_bytes[-1] == pytest.approx(sum(b for _, b in weighted) + 2 * sum(b for _, b in weightless))
    assert inputs.floor_ms("prefill", activation_precision="fp32") > inputs.floor_ms("prefill")
    assert entry_inputs("act", "jetson-agx-orin-64gb", "fp32", 1, 1).activation_mixes == {}  # nothing wider
    # the ggml stack is such a stack; its shares are centred on eager PyTorch's (library kernels), its cost per
    # kernel on tuned-kernels' (graph replay)
    assert get_stack("ggml").activation_precision == "fp32"
    assert (parent_stack("ggml", "share"), parent_stack("ggml", "dispatch")) == ("pytorch-eager", "tuned-kernels")
    term = Term("ggml", wide, 100, 42.5)
    design = _Design([Observation("x", "s", "jetson-agx-orin-64gb", host_terms(profile), (term,), 10.0)])
    _, rows = design.prior()
    parent_of = {i: parent for i, parent, _, _ in rows}
    assert parent_of[design.index[("share", "ggml")]] == design.index[("share", "pytorch-eager")]
    assert parent_of[design.index[("bandwidth", "ggml")]] == design.index[("bandwidth", "pytorch-eager")]
    assert parent_of[design.index[("dispatch", "ggml")]] == design.index[("dispatch", "tuned-kernels")]


def test_fused_stacks_launch_fewer_kernels_than_eager():
    assert fused_count([True, False, False, True, False, True, True]) == 6  # 4 anchors, 2 fused runs
    spec = load_model_spec("smolvla-tiny")
    counts = count_kernels(spec, Workload.from_spec(spec), "fp32")
    for phase in ("vision", "prefill", "denoise_step"):
        assert 0 < counts.fused[phase] < counts.eager[phase]
    assert counts.per_phase("eager", 3)["action"] == 3 * counts.eager["denoise_step"]


def test_an_operator_takes_the_longer_of_its_compute_and_memory_time_at_the_achieved_rates():
    # at 100 TFLOP/s and 1000 GB/s: 1 TFLOP and 0.1 GB take 10 ms of compute, 0.1 ms of memory traffic; 1 GFLOP
    # and 1 GB take 0.01 ms of compute, 1 ms of memory traffic
    mix = OperatorMix.of([1e12, 1e9], [1e8, 1e9], 100.0, 1000.0)
    assert mix.floor_ms() == pytest.approx(10.0 + 1.0)
    assert mix.floor_ms(0.5, 0.25) == pytest.approx(20.0 + 4.0)
    # at 0.5% of peak the second operator turns compute-bound: 2 ms of compute against 1 ms / 0.9 of memory traffic
    assert mix.floor_ms(0.005, 0.9) == pytest.approx(2000.0 + 2.0)
    stacked = MixStack.of([mix, OperatorMix.of([5e11], [0.0], 50.0, 100.0)])
    assert stacked.floors(np.array([0.5, 0.2]), np.array([0.25, 0.3])) == pytest.approx([24.0, 50.0])


def test_the_fit_recovers_parameters_of_noiseless_data():
    truth = {"share": 0.4, "bandwidth": 0.7, "dispatch_ms": 0.02, "host": 5.0, "gflop": 0.5}
    jetson_shares = (0.25, 0.5)  # a Jetson reaches less of its datasheet than a desktop card
    observations = []
    shapes = [(10.0, 2.0, 1000), (40.0, 1.0, 500), (5.0, 30.0, 4000), (80.0, 10.0, 3000), (2.0, 60.0, 800)]
    for i, (compute, memory, kernels) in enumerate(shapes):
        # each device at two precisions (two peaks): what separates host time from device-side kernel time
        peak = (165.0, 5.0)[i % 2]
        mix = OperatorMix.of([compute * peak * 1e9, 0.0], [0.0, memory * 1e9], peak, 1000.0)  # ms at 1000 GB/s
        for device, host, (share, bandwidth) in (
            ("rtx-4090", 1.0, (truth["share"], truth["bandwidth"])),
            ("jetson-thor", truth["host"], jetson_shares),
        ):
            floor = compute / share + memory / bandwidth
            ms = floor + kernels * (truth["dispatch_ms"] * host + truth["gflop"] / peak)
            terms = host_terms(load_device_profile(device))
            term = Term("pytorch-eager", mix, kernels, peak)
            # each published ten times: enough data that the priors no longer pull the estimates
            observations += [
                Observation(f"{i} {device} {copy}", f"source {i}", device, terms, (term,), ms) for copy in range(10)
            ]
    fitted = fit(observations)
    assert fitted.stacks["pytorch-eager"].share_of_peak == pytest.approx(truth["share"], rel=0.05)
    assert fitted.stacks["pytorch-eager"].share_of_bandwidth == pytest.approx(truth["bandwidth"], rel=0.05)
    assert fitted.stacks["pytorch-eager"].dispatch_us == pytest.approx(truth["dispatch_ms"] * 1e3, rel=0.05)
    assert fitted.host_factor["jetson-thor"] == pytest.approx(truth["host"], rel=0.05)
    assert fitted.kernel_gflop == pytest.approx(truth["gflop"], rel=0.05)
    assert fitted.shares("pytorch-eager", "jetson") == pytest.approx(jetson_shares, rel=0.05)


def test_leave_one_out_never_uses_the_held_out_entry():
    held_out = ENTRIES[1]
    base = {s.entry.model + s.entry.device + s.entry.stack: s for s in score_projections(ENTRIES)}
    key = held_out.model + held_out.device + held_out.stack
    changed = [*ENTRIES[:1], held_out.model_copy(update={"phases_ms": {"e2e": 250.0}}), *ENTRIES[2:]]
    again = {s.entry.model + s.entry.device + s.entry.stack: s for s in score_projections(changed)}
    assert again[key].projected_ms == pytest.approx(base[key].projected_ms, rel=1e-9)
    assert again[key].reported_ms == 250.0 and again[key].fitted_on == len(ENTRIES) - 1
    other = ENTRIES[0].model + ENTRIES[0].device + ENTRIES[0].stack
    assert again[other].projected_ms != pytest.approx(base[other].projected_ms, rel=1e-3)  # others do see it


def test_project_all_json_gives_labelled_rows_with_bands_for_every_family(tiny_entries, tmp_path):
    """Every family projects; a stack with fewer than three published entries is marked uncalibrated and takes the
    band of every entry, never one of its own."""
    out = tmp_path / "projected.json"
    args = ["project", "--all", *[a for m in TINY for a in ("--model", m)], "--device", "rtx-4090"]
    result = CliRunner().invoke(app, [*args, "--precision", "bf16", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert document["label"] == "projected" and document["ranked"] is False
    rows = document["rows"]
    assert {load_model_spec(r["model"]).family for r in rows} == {load_model_spec(m).family for m in TINY}
    assert {r["stack"] for r in rows} == {"pytorch-eager", "pytorch-compiled", "onnxruntime", "tensorrt"}
    for row in rows:
        assert row["label"] == "projected" and row["energy_label"] == "estimated"
        assert row["phases_ms"]["e2e"] == pytest.approx(
            sum(row["phases_ms"][p] for p in ("vision", "prefill", "action"))
        )
        assert row["inference_hz"] == pytest.approx(1000 / row["phases_ms"]["e2e"])
        assert row["joules_per_inference"] > 0 and row["fits"] is True
        assert row["error_band"] > 0 and 0 <= row["band_coverage"] <= 1
        assert row["uncalibrated"] == (row["stack"] != "pytorch-eager")  # 4 eager entries, 2 compiled, none else
        if row["uncalibrated"]:
            assert (
                row["band_basis"] == "every entry" and row["error_band"] == document["bands"]["by_basis"]["every entry"]
            )
    assert set(document["uncalibrated"]) == set(document["error_bands"]) - {"pytorch-eager"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "smolvla-tin", "--device", "rtx-4090"], "Did you mean 'smolvla-tiny'"),
        (["--model", "smolvla-tiny", "--device", "rtx-4900"], "Did you mean 'rtx-4090'"),
        (["--model", "smolvla-tiny", "--device", "rtx-4090", "--stack", "tensorrtt"], "Did you mean 'tensorrt'"),
        (["--model", "smolvla-tiny", "--device", "rtx-4090", "--stack", "openvino"], "does not run the openvino"),
        (["--model", "smolvla-tiny"], "one --model and one --device, or --all"),
    ],
)
def test_bad_names_get_one_line_errors_with_suggestions(tiny_entries, args, message):
    result = CliRunner().invoke(app, ["project", *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_model_that_does_not_fit_says_so(tiny_entries):
    args = [
        "project",
        "--model",
        "pi0",
        "--device",
        "jetson-orin-nano-8gb",
        "--stack",
        "pytorch-eager",
        "--precision",
        "fp32",
    ]
    runner = CliRunner()
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert row["fits"] is False and row["memory_needed_gb"] > row["usable_memory_gb"] == 6.4
    table = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert "does NOT fit" in table.output


def test_a_model_between_usable_and_nameplate_memory_does_not_fit(tiny_entries):
    """pi0 at bf16 needs about 7.7 GB: under the Orin Nano's 8 GB nameplate, over the 6.4 GB its OS leaves."""
    result = CliRunner().invoke(
        app, ["project", "-m", "pi0", "-d", "jetson-orin-nano-8gb", "--stack", "pytorch-eager", "--json"]
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    profile = load_device_profile("jetson-orin-nano-8gb")
    assert profile.usable_gb < row["memory_needed_gb"] < profile.memory_gb.value
    assert row["usable_memory_gb"] == profile.usable_gb and row["fits"] is False


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache root, no shipped seed, and no traced facts or fit remembered in this process."""
    monkeypatch.setenv("VLABENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(projection_cache, "seed_root", lambda: tmp_path / "no-seed")
    monkeypatch.setattr(projection_cache, "_FACTS", {})
    projection_score.fitted_parameters.cache_clear()
    projection_score.fitted_model.cache_clear()
    yield tmp_path / "projection"
    projection_score.fitted_parameters.cache_clear()
    projection_score.fitted_model.cache_clear()


def test_traced_facts_are_cached_on_disk_and_keyed_by_what_they_depend_on(fresh_cache, monkeypatch):
    spec = load_model_spec("smolvla-tiny")
    workload = Workload.from_spec(spec)
    first = projection_cache.model_facts(spec, workload, "bf16")
    assert len(list((fresh_cache / "facts").glob("*.json"))) == 1
    monkeypatch.setattr(projection_cache, "_FACTS", {})  # a new process: only the disk remembers

    def no_trace(*args):
        raise AssertionError("traced again although the disk cache holds these facts")

    monkeypatch.setattr(projection_cache, "_trace_facts", no_trace)
    assert projection_cache.model_facts(spec, workload, "bf16") == first  # a hit: nothing traced
    with pytest.raises(AssertionError, match="traced again"):  # another precision, workload or spec is a miss
        projection_cache.model_facts(spec, workload, "fp32")
    with pytest.raises(AssertionError, match="traced again"):
        projection_cache.model_facts(spec, Workload.from_spec(spec, steps=workload.steps + 1), "bf16")
    with pytest.raises(AssertionError, match="traced again"):
        projection_cache.model_facts(spec.model_copy(update={"description": "an edited spec"}), workload, "bf16")
    monkeypatch.setattr(projection_cache, "code_fingerprint", lambda sources: "edited code")
    with pytest.raises(AssertionError, match="traced again"):  # an edit of the tracing code is a miss too
        projection_cache.model_facts(spec, workload, "bf16")


def test_the_fit_is_cached_and_refitted_when_an_entry_changes(fresh_cache, tiny_entries, monkeypatch):
    first = projection_score.fitted_model()
    assert len(list((fresh_cache / "scores-loso").glob("*.json"))) == 1
    projection_score.fitted_parameters.cache_clear()
    projection_score.fitted_model.cache_clear()
    calls = []
    monkeypatch.setattr(projection_score, "fit", lambda observations: calls.append(1) or first.parameters)
    assert projection_score.fitted_model() == first and calls == []  # read back, nothing refitted
    changed = [*tiny_entries[:-1], tiny_entries[-1].model_copy(update={"phases_ms": {"e2e": 40.0}})]
    monkeypatch.setattr(projection_score, "reported_latencies", lambda: changed)
    projection_score.fitted_parameters.cache_clear()
    projection_score.fitted_model.cache_clear()
    projection_score.fitted_model()
    # the all-entries fit and one fit per held-out source: entries of one source are held out together
    assert len(calls) == 1 + len({e.source_group for e in changed}) == 1 + 4


@pytest.mark.parametrize("model", ["act-tiny", "smolvla-tiny"])  # traced operators; analytic ones over 10 steps
def test_the_fast_floor_equals_the_roofline_analysis(model):
    spec = load_model_spec(model)
    workload = Workload.from_spec(spec)
    profile = load_device_profile("jetson-thor")
    ceiling = datasheet_ceiling(profile, "bf16")
    report = analyze(spec, workload, "bf16", profile.name, [ceiling], top_operators=0)
    inputs = projection_score.model_inputs(spec, workload, "bf16", profile)
    for phase in ("vision", "prefill", "action", "e2e"):
        assert inputs.roofline_ms[phase] == pytest.approx(report.phase(phase).bounds["datasheet"].floor_ms, rel=1e-9)


def test_project_takes_the_workload_from_cameras_and_steps(tiny_entries):
    base = ["project", "-m", "pi0-tiny", "-d", "jetson-thor", "--stack", "pytorch-eager", "--json"]
    default = json.loads(CliRunner().invoke(app, base).stdout)["rows"][0]
    result = CliRunner().invoke(app, [*base, "--steps", "2", "--cameras", "1"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert (row["steps"], row["cameras"]) == (2, 1) and (default["steps"], default["cameras"]) != (2, 1)
    assert row["phases_ms"]["action"] < default["phases_ms"]["action"]
    refused = CliRunner().invoke(app, [*base, "--steps", "0"])
    assert refused.exit_code == 2 and "Traceback" not in refused.output


CONCURRENT_ENTRY = """
import os, sys, time
from pydantic import BaseModel
from vlabench.analysis.projection_cache import cached

class Entry(BaseModel):
    value: int

def compute():
    with open(sys.argv[1], "a") as log:
        log.write(f"{os.getpid()}\\n")
    time.sleep(1.0)
    return Entry(value=7)

print(cached("test", {"entry": "shared"}, Entry, compute).value)
"""


def test_processes_missing_one_entry_at_once_compute_it_once(tmp_path):
    """Two processes (two test workers, a sweep and a site build) miss the same cache entry together: one computes
    it, the other waits on the entry's lock and reads what was stored."""
    import os
    import subprocess
    import sys

    log = tmp_path / "computed.log"
    env = {**os.environ, "VLABENCH_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-c", CONCURRENT_ENTRY, str(log)]
    both = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [process.communicate(timeout=120)[0].strip() for process in both]
    assert outputs == ["7", "7"] and all(process.returncode == 0 for process in both)
    assert len(log.read_text().split()) == 1  # computed once
