"""``run --batch`` and ``run --robots``: every model family serves several robots from one policy instance through
real backends; the result holds the serving block, and its cost and energy are shared among the robots."""

from __future__ import annotations

import json

import pytest
import recorded
import torch
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.results.schema import RunResult

runner = CliRunner()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """The torch-compile case compiles a replica per batch size in this process: later tests in this worker start
    from an empty compile cache, not near the recompile limit."""
    yield
    torch._dynamo.reset()


FAST = ["--min-iterations", "2", "--min-duration", "0", "--warmup", "1", "--threads", "1"]
ENERGY = ["--energy-meter", "estimated", "--energy-window", "1", "--idle-window", "0.1"]


def run_json(*args: str) -> RunResult:
    done = runner.invoke(app, ["run", *FAST, *args, "--json"])
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
    if result.energy is None:
        return
    # the device's hour and energy are shared by the three robots it serves
    assert result.cost.robots_per_device == 3 and result.cost.rows_per_inference == serving.mean_batch
    per_action = result.energy.joules_per_inference / (serving.mean_batch * result.cost.execution.actions_per_inference)
    assert serving.joules_per_action == pytest.approx(per_action)


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


def test_a_batch_that_does_not_fit_is_refused_before_allocating(tmp_path):
    done = runner.invoke(app, ["run", "-m", "smolvla", "--batch", "60000", "-o", str(tmp_path)])
    assert done.exit_code == 4 and "GiB" in done.output
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(
    "flags, named",
    [(["--robots", "0"], "--robots"), (["--batch", "0"], "--batch"), (["--max-wait-ms", "-1"], "--max-wait-ms")],
)
def test_impossible_serving_settings_are_refused_before_any_work(flags, named, tmp_path):
    done = runner.invoke(app, ["run", "-m", "smolvla-tiny", *flags, "-o", str(tmp_path)])
    assert done.exit_code == 2 and named in done.output
    assert not list(tmp_path.glob("*.json"))


def test_a_sweep_takes_batch_and_robots_as_axes(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "fixed: {model: smolvla-tiny, warmup: 1, min_iterations: 2, min_duration_s: 0, threads: 1, "
        "energy_meter: none, serve_duration_s: 1}\n"
        "matrix: {batch: [1, 2], robots: [null, 3]}\n"
        "exclude: [{batch: 1, robots: 3}]\n"
    )
    done = runner.invoke(app, ["sweep", str(sweep), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output[-3000:]
    results = [RunResult.model_validate_json(p.read_text()) for p in (tmp_path / "out").glob("*.json")]
    seen = {(r.workload.batch, r.serving.robots if r.serving else None) for r in results}
    assert seen == {(1, None), (2, None), (2, 3)}
