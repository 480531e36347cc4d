"""DP-Cache schedules and calibration, lossless expert fusion, V-AEFusion, open-loop fidelity, and their CLI."""

import json

import pytest
import torch
from typer.testing import CliRunner

from vlabench.backends import BackendOptions, get_backend
from vlabench.cli.app import app
from vlabench.errors import InputError
from vlabench.measure.action_loops import EulerLoop
from vlabench.measure.dp_cache import DPCacheSchedule, parse_schedule, segment_schedule
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.optimizations.fidelity import FidelityVariant, open_loop
from vlabench.optimizations.fusion import FusionLoop

CPU = torch.device("cpu")


def test_schedules_from_sets_segments_and_files(tmp_path):
    assert parse_schedule("{0,1,2,6,8,9}", 10).skipped == (3, 4, 5, 7)
    assert parse_schedule("0, 2,1", 4).computed == (0, 1, 2)
    assert segment_schedule(10, 3, 7, 2).computed == (0, 1, 2, 3, 5, 7, 8, 9)
    assert parse_schedule("segment:3-7", 10).computed == (0, 1, 2, 3, 8, 9)
    path = parse_schedule("{0,4}", 6).write(tmp_path / "s.dp-cache.json")
    assert parse_schedule(str(path), 6).computed == (0, 4)
    for bad, message in (("{1,2}", "step 0"), ("{0,12}", "beyond"), ("0-3", "give a set"), ("segment:0-3", "inside")):
        with pytest.raises(InputError, match=message):
            parse_schedule(bad, 10)
    with pytest.raises(InputError, match="for 6 steps"):
        parse_schedule(str(path), 10)


class Counting:
    def __init__(self, policy):
        self.policy, self.calls = policy, []

    def denoise_step(self, x_t, t, cache):
        self.calls.append(float(t[0]))
        return self.policy.denoise_step(x_t, t, cache)


def tiny_policy(name="smolvla-tiny", fuse=False):
    spec = load_model_spec(name)
    workload = Workload.from_spec(spec)
    policy = get_backend("torch", BackendOptions(fuse_expert_kv=fuse)).prepare(spec, workload, CPU, "fp32", 0)
    return spec, workload, policy


def inputs(spec, workload, seed):
    obs = synthetic_observation(spec, workload, seed, torch.float32, CPU)
    return obs, initial_noise(workload, seed, torch.float32, CPU)


def test_dp_cache_skips_expert_calls_and_reuses_the_latest_velocity():
    spec, workload, policy = tiny_policy()
    obs, noise = inputs(spec, workload, 0)
    cache = policy.prefix(obs)
    schedule = parse_schedule("{0,1,2,6,8,9}", workload.steps)
    counting = Counting(policy)
    actions = EulerLoop(workload.steps, 1, CPU, schedule).sample(counting, cache, noise)
    assert len(counting.calls) == 6 and counting.calls[3] == pytest.approx(1 - 6 / workload.steps)
    # by hand: steps 3, 4, 5 reuse step 2's velocity, step 7 reuses step 6's
    loop, x, velocity = EulerLoop(workload.steps, 1, CPU), noise, None
    for index, t in enumerate(loop.times):
        if index in schedule.computed:
            velocity = policy.denoise_step(x, t, cache)
        x = x + loop.dt * velocity
    assert torch.equal(actions, x)
    full = DPCacheSchedule(steps=workload.steps, computed=tuple(range(workload.steps)))
    exact = EulerLoop(workload.steps, 1, CPU).sample(policy, cache, noise)
    assert torch.equal(EulerLoop(workload.steps, 1, CPU, full).sample(policy, cache, noise), exact)
    assert not torch.equal(actions, exact)


@pytest.mark.parametrize("name", ["smolvla-tiny", "pi0-tiny", "pi05-tiny"])
def test_expert_kv_fusion_is_bit_exact(name):
    spec, workload, plain = tiny_policy(name)
    _, _, fused = tiny_policy(name, fuse=True)
    for seed in range(3):  # the double-buffered static K/V must hold across inferences
        obs, noise = inputs(spec, workload, seed)
        loop = EulerLoop(workload.steps, 1, CPU)
        assert torch.equal(loop.sample(fused, fused.prefix(obs), noise), loop.sample(plain, plain.prefix(obs), noise))
    # the tiny replicas' attention is near uniform, so the actions alone would not tell keys from values
    cache, unfused = fused.prefix(obs), plain.prefix(obs)
    for index, (k, v) in cache.expert_kv.cross.items():
        expected = plain.model.expert.layers[index].project_prefix(unfused.keys[index], unfused.values[index])
        assert torch.equal(k, expected[0]) and torch.equal(v, expected[1])
    assert bool(cache.expert_kv.cross) == (name == "smolvla-tiny")
    assert fused.details()["fuse_expert_kv"] is True


@pytest.mark.parametrize("fuse", [False, True])
def test_fusion_loop_threads_match_the_sequential_arithmetic(fuse):
    spec, workload, policy = tiny_policy(fuse=fuse)
    sequence = [inputs(spec, workload, seed) for seed in range(4)]
    outputs = {}
    for concurrent in (False, True):
        loop = FusionLoop(
            policy.prefix, policy, EulerLoop(workload.steps, 1, CPU), policy.synchronize, 5, CPU, concurrent
        )
        outputs[concurrent] = [loop.cycle(obs, noise) for obs, noise in sequence]
        loop.close()
    for (sequential, _), (threaded, _) in zip(outputs[False], outputs[True], strict=True):
        assert torch.equal(sequential, threaded)
    first, later = outputs[True][0][1], outputs[True][1][1]
    assert first.stale is None and first.overlap_ms == 0
    assert later.stale is not None and later.overlap_ms >= 0 and later.fresh[1] == later.end


def test_fusion_with_zero_stale_steps_is_the_exact_loop():
    spec, workload, policy = tiny_policy()
    loop = FusionLoop(policy.prefix, policy, EulerLoop(workload.steps, 1, CPU), policy.synchronize, 0, CPU)
    for seed in range(2):
        obs, noise = inputs(spec, workload, seed)
        actions, _ = loop.cycle(obs, noise)
        assert torch.equal(actions, EulerLoop(workload.steps, 1, CPU).sample(policy, policy.prefix(obs), noise))
    loop.close()


def test_open_loop_errors_are_zero_for_lossless_variants_and_grow_with_staleness():
    spec = load_model_spec("smolvla-tiny")
    workload = Workload.from_spec(spec)
    variants = [
        FidelityVariant(name="lossless", fuse_expert_kv=True),
        *(FidelityVariant(name=f"s={s}", stale_steps=s) for s in (0, 3, 6, 9)),
        FidelityVariant(name="dp", dp_cache=parse_schedule("{0,1,2,6,8,9}", workload.steps)),
    ]
    errors = {v.name: e for v, e in open_loop(spec, workload, 12, variants, 0, CPU)}
    assert errors["lossless"].max_abs == 0 and errors["s=0"].max_abs == 0
    assert 0 < errors["s=3"].rmse < errors["s=6"].rmse < errors["s=9"].rmse
    assert errors["dp"].samples == 12 and errors["dp"].cosine < 1


def test_run_with_dp_cache_and_fusion_records_the_optimization(fast_run, tmp_path):
    args = ["run", "--model", "smolvla-tiny", "--dp-cache", "{0,1,2,6,8,9}", "--fuse-expert-kv", *fast_run.args()]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["optimization"]["dp_cache"]["computed"] == [0, 1, 2, 6, 8, 9]
    assert data["optimization"]["fuse_expert_kv"] is True and data["optimization"]["dp_cache_error"]["cosine"] < 1
    assert [s["count"] for s in data["timing"]["denoise_steps"]] == [2] * 6  # spans only on computed steps
    assert (
        "optimized  DP-Cache computes {0,1,2,6,8,9} of 10"
        in CliRunner().invoke(app, [*args, "--out", str(tmp_path)]).output
    )


def test_a_backend_with_dp_cache_is_gated_against_the_same_schedule(fast_run, tmp_path):
    args = [
        "run",
        "--model",
        "smolvla-tiny",
        "--backend",
        "onnxruntime",
        "--dp-cache",
        "segment:3-7/2",
        *fast_run.args(),
    ]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["correctness"]["passed"] is True


def test_optimization_options_are_validated(tmp_path):
    runner = CliRunner()
    wrong = runner.invoke(app, ["run", "--backend", "onnxruntime", "--fuse-expert-kv", "--out", str(tmp_path)])
    assert wrong.exit_code == 2 and "applies to the torch, torch-compile backends" in wrong.output
    bad = runner.invoke(app, ["run", "--model", "smolvla-tiny", "--dp-cache", "{2,3}", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "step 0" in bad.output
    both = runner.invoke(app, ["run", "--backend", "torch-compile", "--dp-cache", "{0,5}", "--fuse-denoise-loop"])
    assert both.exit_code == 2 and "cannot be combined" in both.output


def test_loop_cli_reports_exact_and_fused_cycles(tmp_path):
    args = ["loop", "--model", "smolvla-tiny", "--fusion-stale-steps", "7", "--cycles", "3", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["exact"]["stale_steps"] == 0 and data["fused"]["stale_steps"] == 7
    assert data["exact"]["cycle_ms"]["count"] == 3 and data["exact"]["overlap_ms"]["max"] == 0
    assert data["speedup_p50"] == pytest.approx(data["exact"]["cycle_ms"]["p50"] / data["fused"]["cycle_ms"]["p50"])
    assert any("collapse" in w for w in data["warnings"])
    assert len(list(tmp_path.glob("*.loop.json"))) == 1
    assert "skipped" not in CliRunner().invoke(app, ["rank", str(tmp_path)]).output


def test_calibrate_cli_picks_a_schedule_run_can_load(fast_run, tmp_path):
    path = tmp_path / "tiny.dp-cache.json"
    args = ["calibrate", "dp-cache", "--model", "smolvla-tiny", "--observations", "6", "--out", str(path)]
    loose = CliRunner().invoke(app, [*args, "--budget", "0.6", "--json"])
    assert loose.exit_code == 0, loose.output
    schedule = json.loads(loose.stdout)
    assert schedule["computed"][0] == 0 and len(schedule["computed"]) < 10
    assert schedule["calibration"]["error"] <= 0.6 and len(schedule["calibration"]["step_similarity"]) == 10
    run = CliRunner().invoke(
        app, ["run", "--model", "smolvla-tiny", "--dp-cache", str(path), *fast_run.args(), "--out", str(tmp_path)]
    )
    assert run.exit_code == 0, run.output
    strict = CliRunner().invoke(app, [*args, "--budget", "1e-9", "--json"])
    assert json.loads(strict.stdout)["computed"] == list(range(10))  # random weights: no step is reusable exactly


def test_fidelity_cli_open_loop(tmp_path):
    args = ["fidelity", "--model", "smolvla-tiny", "--observations", "4", "--no-closed-loop", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["variant"]["name"]: row["error"] for row in json.loads(result.stdout)["open_loop"]}
    assert rows["fuse-expert-kv (lossless)"]["max_abs"] == 0 and rows["v-aefusion s=0"]["max_abs"] == 0
    assert rows["v-aefusion s=9"]["rmse"] > rows["v-aefusion s=3"]["rmse"] > 0
    assert len(list(tmp_path.glob("*.fidelity.json"))) == 1


def test_loops_sharing_a_fused_policy_keep_their_own_static_buffers():
    """`vlabench loop` interleaves an exact and a fused loop on one policy: with --fuse-expert-kv each loop needs
    its own K/V buffers, or the exact loop's prefix would overwrite the stale cache the fused loop is reading."""
    spec, workload, fused = tiny_policy("pi0-tiny", fuse=True)
    _, _, plain = tiny_policy("pi0-tiny")
    sequence = [inputs(spec, workload, seed) for seed in range(4)]

    def fused_actions(policy):
        loop = EulerLoop(workload.steps, 1, CPU)
        exact = FusionLoop(policy.prefix_lane(), policy, loop, policy.synchronize, 0, CPU, concurrent=False)
        stale = FusionLoop(policy.prefix_lane(), policy, loop, policy.synchronize, 5, CPU, concurrent=False)
        chunks = []
        for obs, noise in sequence:
            exact.cycle(obs, noise)
            chunks.append(stale.cycle(obs, noise)[0])
        return chunks

    for with_buffers, without in zip(fused_actions(fused), fused_actions(plain), strict=True):
        assert torch.equal(with_buffers, without)


def test_default_variants_keep_the_papers_settings_at_10_steps_and_scale_to_other_loops():
    from vlabench.optimizations.fidelity import default_variants

    names = [v.name for v in default_variants(10)]
    assert "dp-cache {0,1,2,6,8,9} of 10" in names and "dp-cache {0,1,2,6,8,9} + v-aefusion s=5" in names
    assert [v.stale_steps for v in default_variants(10) if v.name.startswith("v-aefusion")] == [0, 3, 5, 7, 9]
    ddpm = {v.name: v for v in default_variants(100)}  # Diffusion Policy: the same fractions of a 100-step loop
    assert ddpm["dp-cache {0,10,20,60,80,90} of 100"].dp_cache.computed == (0, 10, 20, 60, 80, 90)
    gr00t = [v for v in default_variants(4) if v.dp_cache is not None]  # GR00T: one middle segment
    assert [v.dp_cache.computed for v in gr00t] == [(0, 1, 3)]
    assert all(v.stale_steps <= 4 for v in default_variants(4))
