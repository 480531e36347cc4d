"""Analytic FLOPs/bytes against torch's FlopCounterMode and the replica's parameters; roofline math; projection."""

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from vlabench.analysis.flops import count_operators
from vlabench.analysis.operators import total
from vlabench.analysis.roofline import Ceiling, analyze, ceilings_for, efficiency_from, project
from vlabench.cli.app import app
from vlabench.errors import InputError
from vlabench.hardware.devices import load_device_profile
from vlabench.kernels.ceilings import MeasuredCeiling
from vlabench.models.replicas import FlowMatchingVLA, Observation
from vlabench.models.specs import FlowVLASpec, load_model_spec, model_names
from vlabench.models.workload import Workload, synthetic_observation
from vlabench.vocab import Phase

META = torch.device("meta")
FLOW_MODELS = [name for name in model_names() if isinstance(load_model_spec(name), FlowVLASpec)]  # analytic
TINY_ON_THOR = ("roofline", "--model", "smolvla-tiny", "--device", "jetson-thor")


def counted_flops(name: str, workload: Workload) -> dict[str, int]:
    """FlopCounterMode over each phase of the replica, run on the meta device (shapes only, any model size).

    On meta tensors scaled_dot_product_attention decomposes into the two batched matmuls the counter knows."""
    spec = load_model_spec(name)
    with torch.device("meta"):
        model = FlowMatchingVLA(spec)
    obs = synthetic_observation(spec, workload, 0, torch.float32, torch.device("cpu"))
    obs = Observation(*(getattr(obs, f).to(META) for f in ("images", "language_tokens", "language_mask", "state")))
    counts = {}
    with FlopCounterMode(display=False) as mode:
        tokens = model.embed_images(obs.images)
    counts["vision"] = mode.get_total_flops()
    with FlopCounterMode(display=False) as mode:
        cache = model.prefill(obs, tokens)
    counts["prefill"] = mode.get_total_flops()
    x_t = torch.empty(workload.batch, workload.chunk, workload.action_dim, device=META)
    with FlopCounterMode(display=False) as mode:
        model.denoise_step(x_t, torch.empty(workload.batch, device=META), cache)
    counts["denoise_step"] = mode.get_total_flops()
    return counts


@pytest.mark.parametrize("name", FLOW_MODELS)
def test_analytic_flops_agree_with_flop_counter_on_every_model(name):
    spec = load_model_spec(name)
    for workload in (Workload.from_spec(spec), Workload.from_spec(spec, cameras=2, steps=4, chunk=16)):
        counted = counted_flops(name, workload)
        operators = count_operators(spec, workload, "bf16")
        for phase in Phase.MODEL:
            analytic = total(op for op in operators if op.phase == phase).flops
            assert analytic == pytest.approx(counted[phase], rel=0.02), (name, phase, workload.cameras)


@pytest.mark.parametrize("name", FLOW_MODELS)
def test_weight_bytes_cover_every_parameter_the_inference_reads(name):
    """All parameters, except the embedding table (only the instruction's rows are gathered) and an unused lm_head."""
    spec = load_model_spec(name)
    workload = Workload.from_spec(spec)
    with torch.device("meta"):
        model = FlowMatchingVLA(spec)
    llm = model.language_model
    unread = llm.embed_tokens.weight.numel() + (llm.lm_head.weight.numel() if llm.lm_head is not None else 0)
    read = sum(p.numel() for p in model.parameters()) - unread + workload.language_tokens * spec.llm.hidden
    for precision, size in (("fp32", 4), ("bf16", 2)):
        assert total(count_operators(spec, workload, precision)).weight_bytes == read * size


def test_pi0_layer_matches_the_papers_figure_6():
    """XPU paper Fig. 6: one π0 VLM decoder layer is 185.1 GFLOP over 220 MB (≈840 FLOP/B) at 3 cameras, bf16;
    the expert sits near 64.5 FLOP/B (models.md's count gives ≈61 with the same weight-only convention)."""
    spec = load_model_spec("pi0")
    report = analyze(spec, Workload.from_spec(spec, cameras=3), "bf16", "none", [])
    layer = next(r for r in report.layers if r.phase == "prefill" and r.layer == 0)
    assert layer.flops / 1e9 == pytest.approx(185.1, abs=0.05)
    assert layer.weight_bytes / 1e6 == pytest.approx(220.2, abs=0.1)
    assert layer.weight_intensity == pytest.approx(840, rel=0.01)
    assert 55 < report.phase("denoise_step").weight_intensity < 70


def ceiling(peak: float, bandwidth: float, source: str = "datasheet") -> Ceiling:
    return Ceiling(source=source, precision="bf16", peak_tflops=peak, bandwidth_gbs=bandwidth, detail="test")


def test_ceiling_math():
    roof = ceiling(100, 1000)
    assert roof.ridge == pytest.approx(100)
    assert roof.attainable_tflops(10) == pytest.approx(10) and roof.attainable_tflops(1000) == 100
    assert roof.bound(99) == "memory" and roof.bound(101) == "compute"
    assert roof.floor_s(1e12, 1e9) == pytest.approx(0.01)  # compute: 1 TFLOP at 100 TFLOP/s beats 1 ms of bytes


def test_phase_floor_sums_operator_floors_and_action_is_steps_times_step():
    spec = load_model_spec("smolvla")
    workload = Workload.from_spec(spec)
    report = analyze(spec, workload, "bf16", "x", [ceiling(100, 1000)])
    step, action = report.phase("denoise_step"), report.phase("action")
    assert action.flops == pytest.approx(step.flops * workload.steps)
    assert action.bounds["datasheet"].floor_ms == pytest.approx(step.bounds["datasheet"].floor_ms * workload.steps)
    e2e = report.phase("e2e").bounds["datasheet"].floor_ms
    parts = sum(report.phase(p).bounds["datasheet"].floor_ms for p in ("vision", "prefill", "action"))
    assert e2e == pytest.approx(parts)
    # a per-operator floor is never below the whole-phase max(FLOPs/peak, bytes/BW)
    vision = report.phase("vision")
    coarse = max(vision.flops / 100e12, (vision.weight_bytes + vision.activation_bytes) / 1e12) * 1e3
    assert vision.bounds["datasheet"].floor_ms >= coarse * 0.999


def test_two_phase_pattern_on_a_gpu_profile():
    """The paper's finding, from the analytic counts: the π0 VLM is far more intense than the expert, which is
    memory-bound on the RTX 4090's datasheet ceiling."""
    spec = load_model_spec("pi0")
    profile = load_device_profile("rtx-4090")
    report = analyze(spec, Workload.from_spec(spec), "bf16", profile.name, ceilings_for(profile, "bf16"))
    assert report.phase("denoise_step").bounds["datasheet"].bound == "memory"
    assert report.phase("prefill").intensity > 5 * report.phase("denoise_step").intensity


def test_measured_latency_gives_achieved_rate_and_share_and_calibrates_a_projection():
    spec = load_model_spec("smolvla-tiny")
    workload = Workload.from_spec(spec)
    measured = [
        MeasuredCeiling(quantity="gemm_fp32", value=0.1, unit="TFLOP/s", repetitions=3, detail="t"),
        MeasuredCeiling(quantity="memory_bandwidth", value=20, unit="GB/s", repetitions=3, detail="t"),
    ]
    profile = load_device_profile("generic-x86-cpu")
    ceilings = ceilings_for(profile, "fp32", measured)
    assert [c.source for c in ceilings] == ["measured"]
    base = analyze(spec, workload, "fp32", profile.name, ceilings)
    floors = {p.phase: p.bounds["measured"].floor_ms for p in base.phases}
    latency = {name: floor * 4 for name, floor in floors.items()}  # a device at 25% of its roofline
    report = analyze(spec, workload, "fp32", profile.name, ceilings, latency)
    vision = report.phase("vision")
    assert vision.achieved_tflops == pytest.approx(vision.flops / (latency["vision"] / 1e3) / 1e12)
    assert vision.share_of_attainable == pytest.approx(0.25)
    efficiency = efficiency_from(report)
    assert efficiency["denoise_step"] == pytest.approx(0.25)
    thor = load_device_profile("jetson-thor")
    target = analyze(spec, workload, "bf16", thor.name, ceilings_for(thor, "bf16"))
    project(target, efficiency, "test")
    step = target.phase("denoise_step")
    assert step.projected_ms == pytest.approx(step.bounds["datasheet"].floor_ms * 4)
    assert target.phase("action").projected_ms == pytest.approx(step.projected_ms * workload.steps)
    assert target.projection.label == "projected"


def test_projection_rejects_impossible_efficiency():
    spec = load_model_spec("smolvla-tiny")
    report = analyze(spec, Workload.from_spec(spec), "bf16", "x", [ceiling(10, 100)])
    with pytest.raises(InputError, match="efficiency"):
        project(report, {"e2e": 0.0}, "test")


@pytest.fixture
def small_fit(monkeypatch):
    """Fit the projection model on the tiny-model test entries of test_projection (fast), then forget it."""
    from vlabench.analysis import projection_score
    from vlabench.analysis.reported import ReportedLatency

    def entry(model: str, device: str, stack: str, ms: float) -> ReportedLatency:
        fields = {"precision": "bf16", "cameras": 1, "steps": 10, "source": "test data, not a published figure"}
        return ReportedLatency(model=model, device=device, stack=stack, phases_ms={"e2e": ms}, **fields)

    entries = [  # test data only
        entry("smolvla-tiny", "rtx-4090", "pytorch-eager", 20.0),
        entry("pi0-tiny", "rtx-4090", "pytorch-eager", 25.0),
        entry("smolvla-tiny", "jetson-thor", "pytorch-eager", 50.0),
        entry("pi0-tiny", "jetson-thor", "pytorch-eager", 60.0),
    ]
    monkeypatch.setattr(projection_score, "reported_latencies", lambda: entries)
    projection_score.fitted_model.cache_clear()
    projection_score.fitted_parameters.cache_clear()  # in-process: the next module fits its own entries
    yield
    projection_score.fitted_model.cache_clear()
    projection_score.fitted_parameters.cache_clear()  # in-process: the next module fits its own entries


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_roofline_cli_takes_a_quantized_precision_the_profile_quotes(precision, tmp_path, small_fit):
    """The floors use the profile's int8/fp8 peak (its kernel count traced with fp32 activations, as quantized runs
    compute them); a quantized precision the profile quotes no peak for is a one-line error, not a traceback."""
    args = ["roofline", "--model", "smolvla-tiny", "--device", "h200", "--no-html", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--precision", precision, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["report"]
    assert report["precision"] == precision
    assert report["ceilings"][0]["peak_tflops"] == load_device_profile("h200").peak_tflops[precision].value
    refused = CliRunner().invoke(app, [*args, "--precision", "int4"])
    assert refused.exit_code == 2 and "no int4 peak" in refused.output and "Traceback" not in refused.output
    on_cpu = ["roofline", "--model", "smolvla-tiny", "--device", "cpu", "--no-html", "--no-measure-ceilings"]
    unmeasurable = CliRunner().invoke(app, [*on_cpu, "--precision", precision])  # no CPU profile quotes int8/fp8
    assert unmeasurable.exit_code == 2 and f"no {precision} peak" in unmeasurable.output
    hint = "drop --no-measure-ceilings" in " ".join(unmeasurable.output.split())
    assert hint == (precision == "int8")  # the micro-benchmarks measure an int8 GEMM; fp8 needs fp8 tensor cores


def test_roofline_cli_projects_pi0_to_a_device_not_present(tmp_path, small_fit):
    args = ["roofline", "--model", "pi0", "--device", "jetson-thor", "--precision", "bf16", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert not data["present"] and data["measured_ceilings"] == []
    phases = {p["phase"]: p for p in data["report"]["phases"]}
    # the default projection is the fitted model (not the floor): above the floor, the phases summing to e2e
    e2e = phases["e2e"]["projected_ms"]
    assert e2e > phases["e2e"]["bounds"]["datasheet"]["floor_ms"]
    assert e2e == pytest.approx(sum(phases[p]["projected_ms"] for p in ("vision", "prefill", "action")))
    assert "fitted model" in data["report"]["projection"]["method"]
    assert data["report"]["projection"]["label"] == "projected"
    feasibility = data["feasibility"]
    assert feasibility["label"] == "projected" and feasibility["fits_memory"] is True
    # gated per step (cet.gate, ExecutionModel()): one inference per control step, never chunk throughput
    assert feasibility["gate"]["execution"]["mode"] == "per-step"
    assert feasibility["action_hz"] == pytest.approx(min(10.0, 1000 / e2e))
    assert feasibility["meets_control_rate"] == (1000 / e2e >= 10.0)
    layers = [r for r in data["report"]["layers"] if r["block"] in ("llm", "expert") and r["layer"] is not None]
    assert len(layers) == 36
    chart = (tmp_path / "pi0_jetson-thor_bf16.roofline.html").read_text()
    assert 'src="http' not in chart and len(chart) > 1_000_000  # plotly.js inlined: opens offline
    assert "denoise_step" in chart and "datasheet roof" in chart


def test_roofline_cli_on_this_host_measures_ceilings_and_reads_a_result(fast_run, tmp_path):
    runner = CliRunner()
    run = runner.invoke(
        app,
        [
            "run",
            "--model",
            "smolvla-tiny",
            *fast_run.args(min_iterations=3),
            "--measure-ceilings",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert run.exit_code == 0, run.output
    stored = json.loads(run.stdout)["roofline"]
    assert stored["primary"] == "measured" and stored["phases"][0]["achieved_tflops"] > 0
    result_file = next(tmp_path.glob("*.json"))
    args = ["roofline", "--model", "smolvla-tiny", "--precision", "fp32", "--result", str(result_file), "--no-html"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "measured (verdicts)" in table.output and "achieved" in table.output
    assert all(f"gemm_{p}" in table.output for p in ("fp32", "bf16", "fp16"))  # each precision torch runs
    on_ascend = ("roofline", "--model", "smolvla-tiny", "--device", "ascend-310p", "--precision", "fp32")
    ascend = runner.invoke(app, [*on_ascend, "--calibrate", str(result_file), "--no-html"])
    assert ascend.exit_code == 2 and "no fp32 peak" in ascend.output  # the 310P's profile quotes fp16 and int8 only
    calibrated = runner.invoke(
        app,
        [*TINY_ON_THOR, "--calibrate", str(result_file), "--no-html", "--json"],
    )
    assert calibrated.exit_code == 0, calibrated.output
    projection = json.loads(calibrated.stdout)["report"]["projection"]
    assert result_file.name in projection["efficiency_source"] and 0 < projection["efficiency"]["prefill"] <= 1.5


def test_roofline_cli_errors_are_clear():
    runner = CliRunner()
    unknown = runner.invoke(app, ["roofline", "--device", "jetson-thorr", "--no-html"])
    assert unknown.exit_code == 2 and "Did you mean 'jetson-thor'" in unknown.output
    both = runner.invoke(
        app, ["roofline", "--device", "jetson-thor", "--efficiency", "0.5", "--calibrate", "x.json", "--no-html"]
    )
    assert both.exit_code == 2 and "not both" in both.output


def test_optimized_counts_move_hoisted_work_and_scale_the_action_phase():
    spec = load_model_spec("smolvla")
    workload = Workload.from_spec(spec)
    plain, hoisted = (count_operators(spec, workload, "fp32", h) for h in (False, True))
    moved = [op for op in hoisted if op.phase == "prefill" and op.block == "expert"]
    assert {op.name for op in moved} == {"k_proj(prefix)", "v_proj(prefix)"} and len(moved) == 2 * 8
    step = total(op for op in plain if op.phase == "denoise_step").flops
    assert total(op for op in hoisted if op.phase == "denoise_step").flops == pytest.approx(step - total(moved).flops)
    report = analyze(spec, workload, "fp32", "x", [ceiling(1, 10)], computed_steps=6, hoisted=True)
    assert report.phase("action").flops == pytest.approx(6 * report.phase("denoise_step").flops)
    assert report.computed_steps == 6 and report.hoisted
    pi0 = load_model_spec("pi0")  # joint attention only: nothing to hoist
    assert count_operators(pi0, Workload.from_spec(pi0), "bf16", True) == count_operators(
        pi0, Workload.from_spec(pi0), "bf16"
    )
