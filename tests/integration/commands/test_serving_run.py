"""``run --batch`` and ``run --robots``: every model family serves several robots from one policy instance through
real backends; the result holds the serving block, and its cost and energy are shared among the robots."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import vlabench.commands.run.execution
from tests.support import recorded
from tests.support.fast_run import FAST_RUN
from vlabench.cli.app import app
from vlabench.results.schema import RunResult
from vlabench.results.serving_relations import serving_relations

runner = CliRunner()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """The torch-compile case compiles a replica per batch size in this process: later tests in this worker start
    from an empty compile cache, not near the recompile limit."""
    yield
    torch._dynamo.reset()


ENERGY = ["--energy-meter", "estimated", "--energy-window", "1", "--idle-window", "0.1"]


def run_json(*args: str) -> RunResult:
    done = runner.invoke(app, ["run", *FAST_RUN.args(energy_meter=None), *args, "--json"])
    assert done.exit_code == 0, done.output[-3000:]
    return RunResult.model_validate(json.loads(done.stdout))


@pytest.mark.parametrize("model", recorded.TINY_MODELS)
def test_every_family_serves_three_robots_in_batches_of_two(model, tmp_path):
    energy = ENERGY if model == "smolvla-tiny" else ["--energy-meter", "none"]  # the sharing is family-blind
    result = run_json(
        "-m", model, *energy, "--batch", "2", "--robots", "3", "--serve-duration", "1", "-o", str(tmp_path)
    )
    serving = result.serving
    assert result.workload.batch == 2 and serving is not None and serving.transport == "in-process"
    assert serving.robots == 3 and serving.max_batch == 2 and 1.0 <= serving.mean_batch <= 2.0
    assert [robot.robot for robot in serving.per_robot] == [0, 1, 2] and all(r.requests > 0 for r in serving.per_robot)
    assert serving.requests == sum(robot.requests for robot in serving.per_robot)
    assert serving.latency.p50 >= serving.inference.p50 > 0 and serving.queue.min >= 0
    assert serving.requests * result.control.actions_per_chunk == pytest.approx(
        serving.actions_per_s * serving.duration_s
    )
    assert 0 < serving.busy_fraction <= 1 and sum(serving.batch_log.size) >= serving.requests
    assert serving_relations(result) == []
    if result.energy is None:
        assert serving.energy is None and serving.joules_per_action is None and result.cost is None
        return
    # the device's hour and the window's energy are shared by the three robots it served
    assert result.cost.robots_per_device == 3 and result.cost.busy_fraction == serving.busy_fraction
    assert serving.joules_per_action == result.cost.joules_per_action


@pytest.mark.parametrize(
    "backend, batch, sizes", [("onnxruntime", 4, [1, 2, 4]), ("openvino", 4, [1, 2, 4]), ("torch-compile", 2, [1, 2])]
)
def test_compiled_and_graph_backends_serve_robots_on_a_policy_per_batch_size(backend, batch, sizes, tmp_path):
    result = run_json(
        "-m",
        "smolvla-tiny",
        "-b",
        backend,
        "--energy-meter",
        "none",
        "--batch",
        str(batch),
        "--robots",
        "2",
        "--serve-duration",
        "1",
        "-o",
        str(tmp_path),
    )
    assert result.valid and result.backend == backend and result.serving.requests > 0
    # one prepared policy per batch size (graphs exported once each, compiled once each): two robots run unpadded
    assert result.serving.batch_sizes == sizes and result.serving.padded_share == 0
    # warmed up before serving: no request waits on a compile
    assert result.serving.inference.max < 10 * result.timing.phases["e2e"].p50


def test_a_batch_shares_the_cost_of_a_robot_hour_and_the_energy_of_an_action(tmp_path):
    one = run_json("-m", "smolvla-tiny", *ENERGY, "--price-usd", "1000", "-o", str(tmp_path))
    four = run_json("-m", "smolvla-tiny", *ENERGY, "--price-usd", "1000", "--batch", "4", "-o", str(tmp_path))
    assert one.cost.robots_per_device == 1 and four.cost.robots_per_device == 4
    assert four.cost.hardware_usd_per_robot_hour == pytest.approx(one.cost.hardware_usd_per_robot_hour / 4)
    assert four.energy.joules_per_action == pytest.approx(four.energy.joules_per_inference / 4)
    assert four.serving is None


def test_energy_and_cost_per_robot_are_those_of_the_batches_that_ran_and_the_idle_time_between(tmp_path):
    """Issue 47's check: J per action per robot and $ per robot-hour recomputed from the per-batch records (each
    batch's share of the window's energy, idle power over the time no batch ran) equal the result's, and one figure
    of each is all the result states."""
    result = run_json(
        "-m", "smolvla-tiny", *ENERGY, "--price-usd", "1000", "--batch", "4", "--robots", "4", "--serve-duration", "2",
        "-o", str(tmp_path),
    )  # fmt: skip
    served, cost = result.serving, result.cost
    log, energy = served.batch_log, served.energy
    busy_s = sum(log.duration_ms) / 1000
    assert served.busy_s == pytest.approx(busy_s) and served.busy_fraction == pytest.approx(busy_s / served.duration_s)
    joules = sum(log.joules) + energy.idle_joules
    assert energy.idle_joules <= energy.idle_w * (served.duration_s - busy_s) * (1 + 1e-9)
    assert joules == pytest.approx(energy.joules)
    actions = served.requests * served.actions_per_request
    assert joules / actions == pytest.approx(served.joules_per_action) == pytest.approx(cost.joules_per_action)
    hours = cost.assumptions.lifetime_years * 8760 * cost.assumptions.duty_cycle
    hardware = 1000 / hours / served.robots
    electricity = joules / served.duration_s * 3600 / served.robots / 3.6e6 * cost.assumptions.electricity_usd_per_kwh
    assert cost.usd_per_robot_hour == pytest.approx(hardware + electricity)
    per_robot_hour = actions / served.duration_s * 3600 / served.robots
    assert cost.usd_per_million_actions == pytest.approx((hardware + electricity) / per_robot_hour * 1e6)
    # a batch of one costs its own duration, not a full batch's: energy follows the batches' real sizes and times
    assert all(share == pytest.approx(j) for share, j in zip(log.joules, energy_by_duration(log), strict=True))


def energy_by_duration(log) -> list[float]:
    busy = sum(log.joules)
    return [busy * duration / sum(log.duration_ms) for duration in log.duration_ms]


def test_robots_that_would_not_fit_are_refused_before_any_timing_with_the_memory_they_need(tmp_path, monkeypatch):
    def timed(*args, **kwargs):
        raise AssertionError("the timed pass began")

    monkeypatch.setattr(vlabench.commands.run.execution, "timed_pass", timed)
    done = runner.invoke(app, ["run", "-m", "smolvla", "--robots", "65536", "-o", str(tmp_path)])
    assert done.exit_code == 4 and "--robots 65536 needs about" in done.output and "GiB of host memory" in done.output
    assert not list(tmp_path.glob("*.json"))


def test_the_serving_window_is_a_hard_bound_whatever_the_batchers_wait(tmp_path):
    """``--max-wait-ms 60000 --serve-duration 1``: the batches flush at the end of the window; nothing waits a
    minute, and every robot's last request is served."""
    result = run_json("-m", "act-tiny", "--energy-meter", "none", "--batch", "4", "--robots", "2", "--max-wait-ms",
                      "60000", "--serve-duration", "1", "-o", str(tmp_path))  # fmt: skip
    served = result.serving
    assert served.max_wait_ms == 60000 and served.duration_s < 30 and served.unfinished == 0
    assert served.requests >= 2 and served.status == "complete"


@pytest.mark.parametrize("arrivals, most, hz, window", [("closed", 3, "0.5", "0.5"), ("poisson", 2, "2", "1.5")])
def test_the_capacity_search_keeps_the_largest_count_that_passes_under_either_arrivals(
    arrivals, most, hz, window, tmp_path
):
    """A lax gate (a request may take a period: 2 s closed-loop, 0.5 s open-loop, arriving twice a second on
    average over 1.5 s) passes every count up to --max-robots; an impossible one (100 kHz) fails one robot."""
    lax = run_json("-m", "act-tiny", *ENERGY, "--robots", "auto", "--max-robots", str(most), "--arrivals", arrivals,
                   "--control-hz", hz, "--serve-duration", window, "-o", str(tmp_path))  # fmt: skip
    search = lax.serving.capacity
    assert search.arrivals == arrivals and [step.robots for step in search.steps] == [1, 2, 3][:most]
    assert lax.serving.capacity_robots == most == lax.serving.robots and lax.serving.arrivals == arrivals
    at = search.steps[-1]
    assert at.busy_fraction == lax.serving.busy_fraction and at.usd_per_robot_hour == lax.cost.usd_per_robot_hour
    assert at.joules_per_action == lax.cost.joules_per_action and serving_relations(lax) == []
    strict = run_json("-m", "act-tiny", "--energy-meter", "none", "--robots", "auto", "--max-robots", "3",
                      "--arrivals", arrivals, "--control-hz", "100000", "--serve-duration", "0.5",
                      "-o", str(tmp_path))  # fmt: skip
    assert strict.serving.capacity_robots == 0 and [step.passed for step in strict.serving.capacity.steps] == [False]
    assert any(why in strict.serving.capacity.steps[0].reason for why in ("at p99", "shed"))
    assert strict.serving.robots == 1


def test_a_batch_that_does_not_fit_is_refused_before_allocating(tmp_path):
    done = runner.invoke(app, ["run", "-m", "smolvla", "--batch", "60000", "-o", str(tmp_path)])
    assert done.exit_code == 4 and "GiB" in done.output
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--robots", "0"], "--robots"),
        (["--robots", "many"], "--robots"),
        (["--batch", "0"], "--batch"),
        (["--max-wait-ms", "-1"], "--max-wait-ms"),
        (["--arrivals", "bursty"], "--arrivals"),
        (["--max-robots", "0"], "--max-robots"),
    ],
)
def test_impossible_serving_settings_are_refused_before_any_work(flags, named, tmp_path):
    done = runner.invoke(app, ["run", "-m", "smolvla-tiny", *flags, "-o", str(tmp_path)])
    assert done.exit_code == 2 and named in done.output
    assert not list(tmp_path.glob("*.json"))


def test_a_sweep_takes_batch_robots_and_the_capacity_search_as_axes(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "fixed: {model: act-tiny, warmup: 1, min_iterations: 2, min_duration_s: 0, threads: 1, "
        "energy_meter: none, serve_duration_s: 0.5, max_robots: 2, control_hz: 0.5}\n"
        "matrix: {batch: [1, 2], robots: [null, auto]}\n"
        "exclude: [{batch: 1, robots: auto}]\n"
    )
    done = runner.invoke(app, ["sweep", str(sweep), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output[-3000:]
    results = [RunResult.model_validate_json(p.read_text()) for p in (tmp_path / "out").glob("*.json")]
    seen = {(r.workload.batch, r.config.robots, r.serving.capacity_robots if r.serving else None) for r in results}
    assert seen == {(1, None, None), (2, None, None), (2, "auto", 2)}
