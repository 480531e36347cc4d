"""Grouped validation of the projection model (sources and devices held out whole), its bands and their coverage,
published phases and workloads as fitted, power modes, deployed footprints and idle power."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from vlabench.analysis import projection_score
from vlabench.analysis.memory import deployment_footprint
from vlabench.analysis.projection_bands import EVERY, band_table, conformal_quantile
from vlabench.analysis.projection_energy import energy_band, idle_power
from vlabench.analysis.projection_inputs import entry_inputs, workload_for
from vlabench.analysis.projection_score import observations, score_projections
from vlabench.analysis.reported import ReportedLatency
from vlabench.cli import app
from vlabench.errors import InputError
from vlabench.hardware.devices import load_device_profile
from vlabench.models.specs import load_model_spec


def entry(model: str, device: str, ms: float, group: str, stack: str = "pytorch-eager", **extra) -> ReportedLatency:
    fields = {"precision": "bf16", "cameras": 1, "steps": 4, "source": "test data, not a published figure"}
    fields |= {"phases_ms": {"e2e": ms}} | extra
    return ReportedLatency(model=model, device=device, stack=stack, group=group, **fields)


ENTRIES = [  # test data only: two sources that each measured two devices, and a third source
    entry("smolvla-tiny", "rtx-4090", 20.0, "A"),
    entry("smolvla-tiny", "jetson-thor", 50.0, "A"),
    entry("pi0-tiny", "rtx-4090", 25.0, "B"),
    entry("pi0-tiny", "jetson-thor", 60.0, "B"),
    entry("pi0-tiny", "rtx-4090", 9.0, "C", stack="pytorch-compiled"),
    entry("smolvla-tiny", "jetson-thor", 21.0, "C", stack="pytorch-compiled"),
]


def projected(scores) -> dict[tuple[str, str, str], float]:
    return {(s.entry.model, s.entry.device, s.entry.stack): s.projected_ms for s in scores if s.phase == "e2e"}


@pytest.mark.parametrize(
    ("scheme", "changed", "unmoved"),
    [
        # the held-out entry's own source-mate does not see it under leave-one-source-out, but does under
        # leave-one-out; a device-mate does not see it under leave-one-device-out
        ("loso", 0, ("smolvla-tiny", "jetson-thor", "pytorch-eager")),
        ("lodo", 0, ("pi0-tiny", "rtx-4090", "pytorch-eager")),
    ],
)
def test_grouped_validation_holds_a_whole_source_or_device_out(scheme, changed, unmoved):
    base = projected(score_projections(ENTRIES, scheme))
    edited = [*ENTRIES[:changed], ENTRIES[changed].model_copy(update={"phases_ms": {"e2e": 200.0}})]
    edited += ENTRIES[changed + 1 :]
    again = projected(score_projections(edited, scheme))
    assert again[unmoved] == pytest.approx(base[unmoved], rel=1e-9)
    loo = projected(score_projections(edited, "loo"))
    assert loo[unmoved] != pytest.approx(projected(score_projections(ENTRIES, "loo"))[unmoved], rel=1e-3)


def test_a_published_phase_is_fitted_with_the_stack_that_ran_it_and_without_host_time():
    published = entry(
        "gr00t-n1.6-tiny",
        "rtx-4090",
        30.0,
        "G",
        stack="tensorrt",
        phases_ms={"prefix": 10.0, "action": 15.0, "e2e": 30.0},
        phase_stacks={"prefix": "pytorch-eager"},
        host_ms=4.0,
    )
    found = {o.label.rsplit(" ", 1)[1]: o for o in observations(published)}
    assert set(found) == {"prefix", "action", "e2e"}
    assert [t.stack for t in found["prefix"].terms] == ["pytorch-eager", "pytorch-eager"]  # vision + prefill
    assert [t.stack for t in found["action"].terms] == ["tensorrt"]
    assert [t.stack for t in found["e2e"].terms] == ["pytorch-eager", "pytorch-eager", "tensorrt"]
    assert found["e2e"].observed_ms == 26.0 and found["prefix"].observed_ms == 10.0
    assert {o.group for o in found.values()} == {"G"}


@pytest.mark.parametrize(
    ("phases", "extra", "message"),
    [
        ({"prefix": 10.0, "vision": 4.0, "e2e": 30.0}, {}, "not both"),
        ({"prefix": 20.0, "action": 15.0, "e2e": 30.0}, {}, "exceed its e2e"),
        ({"action": 25.0, "e2e": 30.0}, {"host_ms": 10.0}, "exceed its e2e"),
        ({"e2e": 0.0}, {}, "positive latency"),
    ],
)
def test_a_published_entry_whose_phases_contradict_it_is_refused(phases, extra, message):
    with pytest.raises(ValidationError, match=message):
        entry("pi0-tiny", "rtx-4090", 1.0, "X", phases_ms=phases, **extra)


def test_prompt_tokens_and_chunk_as_published_enter_the_workload():
    spec = load_model_spec("pi0-tiny")
    default = workload_for(spec)[1]
    longer = workload_for(spec, prompt_tokens=spec.language_tokens + 20, chunk=default.chunk + 5)[1]
    assert longer.prefix_tokens == default.prefix_tokens + 20 and longer.chunk == default.chunk + 5
    short, long = (entry_inputs("pi0-tiny", "rtx-4090", "bf16", 1, 4, p) for p in (0, 64))
    assert short.floor_ms("prefill") < long.floor_ms("prefill")
    pair = entry_inputs("pi0-tiny", "rtx-4090", "bf16", 1, 4, batch=2)  # a published batch enters too
    assert pair.floor_ms("e2e") > entry_inputs("pi0-tiny", "rtx-4090", "bf16", 1, 4).floor_ms("e2e")


def test_a_power_mode_caps_the_ceiling_and_the_host_clock():
    profile = load_device_profile("jetson-orin-nano-8gb")
    mode = next(m for m in profile.power_modes if m.name == "15W")
    full = entry_inputs("pi0-tiny", profile.name, "bf16", 1, 4)
    capped = entry_inputs("pi0-tiny", profile.name, "bf16", 1, 4, mode=mode.name)
    assert capped.peak_tflops == pytest.approx(full.peak_tflops * mode.compute_share)
    assert capped.mixes["action"].bandwidth == pytest.approx(full.mixes["action"].bandwidth * mode.memory_share)
    assert capped.host.clock_ghz == mode.cpu_ghz < full.host.clock_ghz
    assert capped.floor_ms("e2e") > full.floor_ms("e2e")
    with pytest.raises(InputError, match="MAXN_SUPER"):  # an unknown mode names the device's modes
        entry_inputs("pi0-tiny", profile.name, "bf16", 1, 4, mode="7W")


@pytest.mark.parametrize("model", ["pi0-tiny", "act-tiny", "gr00t-n1.6-tiny", "openvla-7b-tiny"])
def test_a_quantized_deployment_never_needs_more_than_its_16_bit_one(model):
    spec, workload = workload_for(load_model_spec(model))
    traced = None if spec.family in ("pi0", "pi05", "smolvla") else (4096, 8192)
    sixteen = deployment_footprint(spec, workload, "bf16", 0, traced)
    for precision in ("int8", "fp8", "int4"):
        assert deployment_footprint(spec, workload, precision, 0, traced) <= sixteen, precision
    assert deployment_footprint(spec, workload, "fp32", 0, traced) > sixteen
    assert deployment_footprint(spec, workload, "bf16", 2**30, traced) > sixteen + 2**30  # a runtime's arena counts


def test_a_band_is_the_conformal_quantile_and_its_coverage_is_measured_on_held_out_sources():
    assert conformal_quantile([0.1, 0.2, 0.3, 0.4]) == 0.4  # rank ceil(5 * 0.85) = 5: past n, the largest
    assert conformal_quantile([0.05 * i for i in range(1, 21)]) == pytest.approx(0.9)  # rank ceil(21 * 0.85) = 18

    def score(group: str, reported: float, stack: str = "pytorch-eager") -> SimpleNamespace:
        e = SimpleNamespace(stack=stack, device="rtx-4090", source_group=group)
        return SimpleNamespace(entry=e, phase="e2e", reported_ms=reported, projected_ms=100.0)

    # four sources near their projection, one far off: the far one falls outside the band the others give
    scores = [score(g, 100.0 + d) for g in "ABCD" for d in (5, 10)] + [score("E", 190.0), score("E", 195.0)]
    table = band_table(scores, {"rtx-4090": "desktop-gpu"})
    band = table.band("pytorch-eager", "desktop-gpu")
    assert band.basis == "pytorch-eager on desktop-gpu" and band.value == pytest.approx(0.95)  # rank 10 of 10
    assert table.overall_coverage == pytest.approx(0.8)  # every entry but source E's two
    assert table.band("openvino", "desktop-gpu").uncalibrated  # no entry of its own: every entry's band
    assert table.band("openvino", "desktop-gpu").basis == EVERY
    # a pool of fewer than three sources is no pool: their entries err together, so a cell of two sources' five
    # entries and a stack of those entries give way to every entry's band
    tight = [score(g, 101.0) for g in "AB" for _ in range(3)]
    spread = [score(s.entry.source_group, s.reported_ms, "tensorrt") for s in scores]
    two_sources = band_table(tight + spread, {"rtx-4090": "desktop-gpu"})
    assert two_sources.band("pytorch-eager", "desktop-gpu").basis == EVERY
    assert two_sources.band("tensorrt", "desktop-gpu").basis == "tensorrt on desktop-gpu"


def test_an_estimated_idle_power_says_so_and_widens_the_energy_band():
    cited, estimated = load_device_profile("rtx-4090"), load_device_profile("rtx-5090")
    assert not idle_power(cited).estimated and idle_power(cited).watts == cited.idle_w.value
    guess = idle_power(estimated)
    assert guess.estimated and guess.source.startswith("estimated") and "rtx-4090" in guess.source
    assert guess.watts < 0.1 * estimated.tdp_w.value  # the cited desktop cards' share, not 30% of TDP
    tdp = estimated.tdp_w.value
    assert (
        energy_band(0.2, tdp, guess, 50.0, 0.5)
        > 0.2
        == pytest.approx(energy_band(0.2, tdp, idle_power(cited), 50.0, 0.5))
    )


@pytest.fixture
def small_fit(monkeypatch):
    monkeypatch.setattr(projection_score, "reported_latencies", lambda: ENTRIES)
    projection_score.fitted_model.cache_clear()
    projection_score.fitted_parameters.cache_clear()
    yield
    projection_score.fitted_model.cache_clear()
    projection_score.fitted_parameters.cache_clear()


def test_project_takes_a_power_mode_and_refuses_one_the_device_lacks(small_fit):
    base = ["project", "-m", "pi0-tiny", "-d", "jetson-orin-nx-16gb", "--stack", "pytorch-eager", "--json"]
    full = json.loads(CliRunner().invoke(app, base).stdout)["rows"][0]
    capped = CliRunner().invoke(app, [*base, "--power-mode", "10W"])
    assert capped.exit_code == 0, capped.output
    (row,) = json.loads(capped.stdout)["rows"]
    assert row["power_mode"] == "10W" and row["phases_ms"]["e2e"] > full["phases_ms"]["e2e"]
    wrong = CliRunner().invoke(app, [*base, "--power-mode", "MAXN"])
    assert wrong.exit_code == 2 and "MAXN_SUPER" in wrong.output and "Traceback" not in wrong.output
    every = CliRunner().invoke(app, ["project", "--all", "-m", "pi0-tiny", "--power-mode", "10W"])
    assert every.exit_code == 2 and "--power-mode needs --device" in " ".join(every.output.split())
