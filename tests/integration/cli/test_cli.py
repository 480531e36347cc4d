import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import vlabench
from vlabench.cli.app import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"vlabench {vlabench.__version__}"


def test_models_lists_every_spec_with_geometry():
    result = invoke("models", "--json")
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {"smolvla", "pi0", "pi05", "smolvla-tiny", "pi0-tiny", "pi05-tiny"} <= set(rows)
    assert rows["pi0"]["prefix_tokens"] == 816 and rows["pi05"]["prefix_tokens"] == 968
    assert rows["smolvla"]["prefix_tokens"] == 64 + 48 + 1
    assert rows["smolvla"]["steps"] == 10 and rows["smolvla"]["chunk"] == 50
    table = invoke("models")
    assert table.exit_code == 0 and "smolvla" in table.stdout and "450.0M" in table.stdout


def test_devices_marks_the_detected_host():
    result = invoke("devices", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    autos = [row for row in data["profiles"] if row["auto"]]
    assert len(autos) == 1 and autos[0]["detected"]
    assert "--device auto resolves to" in data["host"]
    assert "★" in invoke("devices").stdout


def test_run_prints_phase_table_verdict_and_writes_one_result(fast_run, tmp_path):
    result = invoke("run", "--model", "smolvla-tiny", "--out", str(tmp_path), *fast_run.args())
    assert result.exit_code == 0, result.output
    for text in ("vision encoder", "VLM prefill", "action expert", "end-to-end", "target", "result:"):
        assert text in result.stdout
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    saved = json.loads(files[0].read_text())
    assert saved["model"]["name"] == "smolvla-tiny" and saved["timing"]["iterations"] == 2


def test_run_json_output_is_the_result(fast_run, tmp_path):
    result = invoke(
        "run",
        "--model",
        "pi05-tiny",
        "--json",
        "--out",
        str(tmp_path),
        "--steps",
        "4",
        "--chunk",
        "8",
        *fast_run.args(),
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["workload"]["steps"] == 4 and data["workload"]["chunk"] == 8
    assert len(data["timing"]["denoise_steps"]) == 4
    assert data["control"]["judged_on"].startswith("not enough samples for p99 (2 of the 368")
    assert data["control"]["reaction_ms"] == data["timing"]["phases"]["e2e"]["max"]


def test_run_reads_a_yaml_config_and_flags_override_it(fast_run, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("model: pi0-tiny\ncameras: 2\ncontrol_hz: 1000000\n")
    result = invoke(
        "run", "--config", str(config), "--cameras", "1", "--json", "--out", str(tmp_path), *fast_run.args()
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"]["name"] == "pi0-tiny" and data["workload"]["cameras"] == 1
    assert data["control"]["meets_target"] is False


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--model", "smolvl"], 2, "Did you mean 'smolvla'"),
        (["--backend", "torchh"], 2, "Did you mean 'torch'"),
        (["--precision", "bf61"], 2, "Unknown precision"),
        (["--device", "jetson"], 3, "not a Jetson"),
        (["--device", "cuda"], 3, "no CUDA device"),
        (["--model", "pi0", "--cameras", "20000"], 4, "only"),
        (["--cameras", "0"], 2, "--cameras"),
    ],
)
def test_bad_input_exits_with_the_documented_code_and_no_traceback(tmp_path, args, code, message):
    result = invoke("run", "--out", str(tmp_path), *args)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not list(tmp_path.glob("*.json"))


def test_malformed_config_file_is_a_clear_error(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("model: [unclosed\n")
    result = invoke("run", "--config", str(config))
    assert result.exit_code == 2 and "malformed YAML" in result.output
    config.write_text("modle: smolvla\n")
    result = invoke("run", "--config", str(config))
    assert result.exit_code == 2 and "modle" in result.output


def test_console_script_is_installed():
    completed = subprocess.run(
        [sys.executable, "-m", "vlabench", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0 and completed.stdout.startswith("vlabench ")
