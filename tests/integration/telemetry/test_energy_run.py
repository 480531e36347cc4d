import json
import threading
import time

import pytest
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.commands.run import execute, plan_run
from vlabench.errors import InputError
from vlabench.hardware.devices import load_device_profile
from vlabench.telemetry.energy.select import ASSUMED_WATTS_PER_CORE, choose_meter, estimate_inputs

runner = CliRunner()


def test_estimate_inputs_prefer_flags_then_profile_then_stated_assumptions(make_host):
    generic = load_device_profile("generic-x86-cpu")
    assumed = estimate_inputs(generic, make_host(), None, None)
    assert assumed.tdp_w == 2 * ASSUMED_WATTS_PER_CORE and assumed.tdp_source.startswith("assumption")
    assert assumed.idle_w < assumed.tdp_w and assumed.idle_source.startswith("assumption")
    rtx = load_device_profile("rtx-4090")
    from_profile = estimate_inputs(rtx, make_host(), None, None)
    assert from_profile.tdp_w == rtx.tdp_w.value and "rtx-4090" in from_profile.tdp_source
    flagged = estimate_inputs(generic, make_host(), 65.0, 10.0)
    assert (flagged.tdp_w, flagged.idle_w) == (65.0, 10.0)
    assert (flagged.tdp_source, flagged.idle_source) == ("--tdp-w", "--idle-w")


def test_auto_falls_back_to_an_estimate_and_says_why(make_host):
    choice = choose_meter("auto", load_device_profile("generic-x86-cpu"), make_host())
    if choice.meter.label == "measured":
        pytest.skip("this host exposes a readable RAPL sensor")
    assert choice.meter.method == "estimated-tdp"
    assert any(note.startswith("rapl unavailable") for note in choice.notes)


def test_unknown_meter_suggests_the_closest(make_host):
    with pytest.raises(InputError, match="Did you mean 'tegrastats'"):
        choose_meter("tegrastat", load_device_profile("generic-x86-cpu"), make_host())


def test_run_reports_estimated_energy_cost_and_feasibility(fast_run, tmp_path):
    config = fast_run.config(
        model="smolvla-tiny", energy_meter="estimated", energy_window_s=1.0, idle_window_s=0.3, price_usd=500.0
    )
    result = execute(plan_run(config))
    energy = result.energy
    assert energy.label == "estimated" and energy.method == "estimated-tdp"
    assert energy.window_s >= 1.0 and energy.window_inferences >= 1
    assert energy.meter["tdp_source"] and energy.meter["idle_source"]
    assert energy.joules_per_inference == pytest.approx(energy.average_w * energy.window_s / energy.window_inferences)
    assert energy.joules_per_action == pytest.approx(energy.joules_per_inference)  # per step: one action each
    assert energy.idle_w <= energy.average_w + 1e-9
    cost = result.cost
    assert cost.basis == "hardware+electricity" and cost.price_usd == 500.0 and cost.price_source == "--price-usd"
    assert cost.usd_per_million_actions > 0 and cost.energy_label == "estimated"


def test_external_power_log_is_integrated_over_the_energy_window(fast_run, tmp_path):
    """A fake wall meter logs a constant 42 W twice a second while the run happens; the result must say 42 W."""
    log = tmp_path / "wall.csv"
    log.write_text("timestamp,watts\n")
    stop = threading.Event()

    def logger():
        with log.open("a") as handle:
            while not stop.is_set():
                handle.write(f"{time.time():.3f},42.0\n")
                handle.flush()
                time.sleep(0.5)

    thread = threading.Thread(target=logger, daemon=True)
    thread.start()
    time.sleep(0.6)
    try:
        args = ["run", "--model", "pi0-tiny", "--energy-log", str(log), "--energy-window", "1", "--idle-window", "1"]
        result = runner.invoke(
            app, [*args, "--json", "--out", str(tmp_path / "out"), *fast_run.args(energy_meter=None)]
        )
        time.sleep(0.6)
    finally:
        stop.set()
        thread.join()
    assert result.exit_code == 0, result.output
    energy = json.loads(result.stdout)["energy"]
    assert energy["label"] == "measured" and energy["method"] == "external-csv" and energy["scope"] == "wall"
    assert energy["average_w"] == pytest.approx(42.0, rel=1e-6)
    assert energy["idle_w"] == pytest.approx(42.0, rel=1e-6)
    assert energy["joules_per_inference"] == pytest.approx(42.0 * energy["window_s"] / energy["window_inferences"])


def test_requesting_a_missing_sensor_exits_3(tmp_path):
    result = runner.invoke(app, ["run", "--model", "smolvla-tiny", "--energy-meter", "nvml", "--out", str(tmp_path)])
    if result.exit_code == 0:
        pytest.skip("this host has NVML")
    assert result.exit_code == 3
    assert "NVML" in result.output and "Traceback" not in result.output
    assert not list(tmp_path.glob("*.json"))


def test_rank_command_ranks_a_results_folder(fast_run, tmp_path):
    out = tmp_path / "results"
    for model in ("smolvla-tiny", "pi0-tiny"):
        args = ["run", "--model", model, "--energy-meter", "estimated", "--energy-window", "1", "--idle-window", "0.2"]
        done = runner.invoke(app, [*args, "--price-usd", "300", "--out", str(out), *fast_run.args(energy_meter=None)])
        assert done.exit_code == 0, done.output
    (out / "broken.json").write_text("{")
    # 1 Hz: both tiny runs are feasible per step even on a busy host, so both are ranked
    ranked = runner.invoke(app, ["rank", str(out), "--priority", "energy", "--control-hz", "1", "--json"])
    assert ranked.exit_code == 0, ranked.output
    rows = json.loads(ranked.stdout)
    assert {row["model"] for row in rows} == {"smolvla-tiny", "pi0-tiny"}
    assert [row["rank"] for row in rows] == [1, 1]  # two models: two questions, never ranked against each other
    assert len({row["question"] for row in rows}) == 2
    assert all(row["usd_per_million_actions"] > 0 for row in rows)
    assert "skipped" in ranked.stderr and "broken.json" in ranked.stderr
    impossible = runner.invoke(app, ["rank", str(out), "--control-hz", "1000000"])
    assert impossible.exit_code == 0 and "no:" in impossible.stdout
    missing = runner.invoke(app, ["rank", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no such file" in missing.output
