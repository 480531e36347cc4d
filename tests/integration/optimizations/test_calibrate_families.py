"""`calibrate dp-cache` and `fidelity` on every family with a denoising loop (Euler: flow VLAs and GR00T; DDPM:
Diffusion Policy), refused on the others; the weights (--checkpoint), device and backend they run on."""

import json

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.measure.action_loops import make_action_loop
from vlabench.models.checkpoints import lerobot_name
from vlabench.models.replicas import build_replica
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.optimizations.calibration import EXHAUSTIVE_UP_TO, calibrate_dp_cache
from vlabench.optimizations.fidelity import action_error
from vlabench.results.calibration import DPCacheCalibration

CPU = torch.device("cpu")
LOOPS = {"diffusion-policy-tiny": "ddpm", "gr00t-n1.5-tiny": "euler"}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def calibrate(model: str, path, *extra: str):
    return invoke("calibrate", "dp-cache", "--model", model, "--observations", "2", "--out", str(path), *extra)


def write_checkpoint(name: str, seed: int, folder) -> None:
    """A lerobot-layout ``model.safetensors`` from the replica seeded with ``seed``."""
    source = build_replica(load_model_spec(name), seed, torch.float32, CPU)
    renames = type(source).LEROBOT_RENAMES
    tensors = {lerobot_name(key, renames): value.contiguous() for key, value in source.state_dict().items()}
    save_file(tensors, str(folder / "model.safetensors"))


def error_as_run_executes(model: str, schedule) -> float:
    """The worst relative error of ``schedule`` over the calibration's 2 observations, each run as `vlabench run`
    runs it: one observation, the spec's own action loop from ``make_action_loop``."""
    spec = load_model_spec(model)
    workload = Workload.from_spec(spec)
    replica = build_replica(spec, 0, torch.float32, CPU)
    errors = []
    with torch.inference_mode():
        for seed in range(2):
            obs = synthetic_observation(spec, workload, seed, torch.float32, CPU)
            noise = initial_noise(workload, seed, torch.float32, CPU)
            cache = replica.prefix(obs)
            exact = make_action_loop(spec, workload, CPU).sample(replica, cache, noise)
            actions = make_action_loop(spec, workload, CPU, schedule).sample(replica, cache, noise)
            errors.append(action_error(actions, exact, noise).relative)
    return max(errors)


@pytest.mark.parametrize("model", list(LOOPS))
def test_calibrate_writes_a_schedule_on_the_models_own_loop_that_run_accepts(fast_run, model, tmp_path):
    steps = load_model_spec(model).action.steps
    assert steps >= 4  # something to skip
    path = tmp_path / f"{model}.dp-cache.json"
    result = calibrate(model, path, "--budget", "0.3")
    assert result.exit_code == 0, result.output
    artifact = DPCacheCalibration.model_validate_json(path.read_text())
    schedule, report = artifact.schedule, artifact.schedule.calibration
    assert (artifact.backend, artifact.precision) == ("torch", "fp32") and artifact.device not in (None, "")
    assert report["loop"] == LOOPS[model] and report["candidate"] == "fp32 eager torch"
    assert report["weights"] == "seeded (seed 0)" and report["baseline_error"] == 0
    assert schedule.steps == steps and len(report["step_similarity"]) == steps
    assert schedule.skipped and report["error"] <= 0.3
    assert report["error"] == pytest.approx(error_as_run_executes(model, schedule), rel=1e-4, abs=1e-6)
    run = invoke("run", "--model", model, "--dp-cache", str(path), *fast_run.args(), "--out", str(tmp_path))
    assert run.exit_code == 0, run.output
    (written,) = (p for p in tmp_path.glob("*.json") if p != path)
    optimization = json.loads(written.read_text())["optimization"]
    assert optimization["dp_cache"]["computed"] == list(schedule.computed)


@pytest.mark.parametrize("model", list(LOOPS))
def test_fidelity_reports_dp_cache_and_v_aefusion_and_skips_what_does_not_apply(model, tmp_path):
    args = ["fidelity", "--model", model, "--observations", "2", "--no-closed-loop", "--out", str(tmp_path)]
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {row["variant"]["name"]: row["error"] for row in report["open_loop"]}
    assert rows["exact"]["max_abs"] == 0 and rows["v-aefusion s=0"]["max_abs"] == 0
    dp_cache = [error for name, error in rows.items() if name.startswith("dp-cache")]
    assert dp_cache and all(error["relative"] > 0 and error["samples"] == 2 for error in dp_cache)
    assert any(name.startswith("v-aefusion s=") and error["rmse"] > 0 for name, error in rows.items())
    (skipped,) = report["skipped"]
    assert skipped["variant"].startswith("fuse-expert-kv") and "flow-matching VLAs" in skipped["reason"]
    assert (report["backend"], report["precision"], report["checkpoint"]) == ("torch", "fp32", None)
    tables = invoke(*args)
    assert tables.exit_code == 0 and "skipped fuse-expert-kv" in tables.stdout


@pytest.mark.parametrize(("model", "kind"), [("act-tiny", "single_pass"), ("openvla-7b-tiny", "greedy_decode")])
@pytest.mark.parametrize("command", [("calibrate", "dp-cache"), ("fidelity", "--no-closed-loop")])
def test_heads_without_a_denoising_loop_are_refused_naming_their_loop(command, model, kind, tmp_path):
    result = invoke(*command, "--model", model, "--out", str(tmp_path / "out.json"))
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert "needs a denoising loop" in result.stderr and f"runs {kind}" in result.stderr
    assert "Traceback" not in result.output and not list(tmp_path.iterdir())


def test_checkpoint_weights_are_the_ones_calibrated_and_recorded(tmp_path):
    model = "diffusion-policy-tiny"
    write_checkpoint(model, seed=7, folder=tmp_path)
    seeded, loaded = tmp_path / "seeded.json", tmp_path / "loaded.json"
    tight = ("--budget", "1e-9")  # the first round drops nothing: the similarity and one round of errors are enough
    assert calibrate(model, seeded, *tight).exit_code == 0
    result = calibrate(model, loaded, *tight, "--checkpoint", str(tmp_path))
    assert result.exit_code == 0, result.output
    with_seeded = DPCacheCalibration.model_validate_json(seeded.read_text()).schedule.calibration
    with_checkpoint = DPCacheCalibration.model_validate_json(loaded.read_text()).schedule.calibration
    stamp = with_checkpoint["weights"]
    assert stamp.startswith(str((tmp_path / "model.safetensors").resolve()))
    assert with_checkpoint["step_similarity"] != with_seeded["step_similarity"]
    args = ["fidelity", "--model", model, "--observations", "2", "--no-closed-loop", "--out", str(tmp_path), "--json"]
    fidelity = invoke(*args, "--checkpoint", str(tmp_path / "model.safetensors"))
    assert fidelity.exit_code == 0, fidelity.output
    assert json.loads(fidelity.stdout)["checkpoint"] == stamp


def test_another_backend_or_precision_computes_the_schedules_actions(tmp_path):
    path = tmp_path / "bf16.json"
    result = calibrate("diffusion-policy-tiny", path, "--budget", "1e-9", "--precision", "bf16")
    assert result.exit_code == 0, result.output
    assert "torch bf16 on" in result.stderr and "over the budget" in result.output
    artifact = DPCacheCalibration.model_validate_json(path.read_text())
    report = artifact.schedule.calibration
    assert (artifact.backend, artifact.precision) == ("torch", "bf16")
    assert report["candidate"] == "torch bf16 on cpu" and report["baseline_error"] > 0
    assert "via torch bf16" in artifact.schedule.source


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--model", "gr00t-n1.5-tiny", "--device", "nonsense"), 2, "Valid devices:"),
        (("--model", "gr00t-n1.5-tiny", "--backend", "nonsense"), 2, "Valid backends:"),
        (("--model", "gr00t-n1.5-tiny", "--backend", "all"), 2, "one backend"),
        (("--model", "nonsense"), 2, "Valid models:"),
        (("--model", "diffusion-policy-tiny", "--checkpoint", "/no/such/checkpoint"), 2, "no such file"),
        (("--model", "gr00t-n1.5-tiny", "--checkpoint", "/no/such/checkpoint"), 2, "no lerobot layout"),
        (("--model", "gr00t-n1.5-tiny", "--precision", "fp6"), 2, "Valid precisions:"),
    ],
)
def test_bad_targets_are_one_line_errors(args, code, message, tmp_path):
    for command in (("calibrate", "dp-cache"), ("fidelity", "--no-closed-loop")):
        result = invoke(*command, *args, "--out", str(tmp_path / "out.json"))
        assert result.exit_code == code and message in result.stderr, (command, result.output)
        assert "Traceback" not in result.output
    if args[2:] == ("--device", "nonsense"):
        assert "cpu" in result.stderr and "auto" in result.stderr


@pytest.mark.parametrize(("steps", "message"), [("20", "trained with 10 timesteps"), ("5", "--steps must be 10")])
def test_ddpm_runs_every_training_timestep(steps, message, tmp_path):
    result = calibrate("diffusion-policy-tiny", tmp_path / "out.json", "--steps", steps)
    assert result.exit_code == 2 and message in result.stderr


def test_long_loops_are_searched_step_by_step_in_order_of_similarity():
    spec = load_model_spec("gr00t-n1.5-tiny")
    steps = EXHAUSTIVE_UP_TO + 4
    workload = Workload.from_spec(spec, steps=steps)
    schedule = calibrate_dp_cache(spec, workload, 2, 0.05, 0, CPU)
    report = schedule.calibration
    assert report["search"].startswith("similarity-ordered") and report["candidates_evaluated"] == steps - 1
    assert schedule.skipped and report["error"] <= 0.05
    assert [entry["dropped"] for entry in report["path"]] == sorted(
        schedule.skipped, key=lambda step: -report["step_similarity"][step]
    )


def test_calibrate_out_may_be_a_folder_and_an_unwritable_one_is_refused_first(tmp_path):
    from typer.testing import CliRunner

    from vlabench.cli import app

    runner = CliRunner()
    folder = tmp_path / "schedules"
    folder.mkdir()
    done = runner.invoke(app, ["calibrate", "dp-cache", "-m", "smolvla-tiny", "--observations", "2", "-o", str(folder)])
    assert done.exit_code == 0, done.output
    assert (folder / "smolvla-tiny.dp-cache.json").is_file()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    refused = runner.invoke(app, ["calibrate", "dp-cache", "-m", "smolvla-tiny", "-o", str(blocker / "x.json")])
    assert refused.exit_code == 2 and "is not a folder" in refused.output and "calibrating" not in refused.output
