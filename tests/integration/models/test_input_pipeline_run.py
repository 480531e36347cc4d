"""``vlabench run`` times the input pipeline (``models.input_pipeline``) as phases inside end-to-end, and leaves it
out when told to."""

import json

import pytest
from typer.testing import CliRunner

from vlabench.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize(("name", "backend"), [("smolvla-tiny", "torch"), ("act-tiny", "onnxruntime")])
def test_a_run_times_the_pipeline_inside_end_to_end_unless_told_not_to(fast_run, tmp_path, name, backend):
    base = ["run", "-m", name, "-b", backend, *fast_run.args(min_iterations=3), "--json"]
    timed = runner.invoke(app, [*base, "--out", str(tmp_path / "on")])
    assert timed.exit_code == 0, timed.output
    result = json.loads(timed.stdout)
    phases = result["timing"]["phases"]
    assert {"preprocess", "postprocess"} <= set(phases) and result["config"]["preprocess"] is True
    inside = phases["preprocess"]["mean"] + phases["prefix"]["mean"] + phases["action"]["mean"]
    assert inside <= phases["e2e"]["mean"] * 1.02 + 0.5
    assert len(result["timing"]["samples_ms"]["preprocess"]) == result["timing"]["iterations"]
    left_out = runner.invoke(app, [*base, "--no-preprocess", "--out", str(tmp_path / "off")])
    assert left_out.exit_code == 0, left_out.output
    without = json.loads(left_out.stdout)
    assert not {"preprocess", "postprocess"} & set(without["timing"]["phases"])
    assert without["config"]["preprocess"] is False and without["config_hash"] != result["config_hash"]
