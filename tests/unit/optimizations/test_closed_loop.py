from dataclasses import replace

import numpy as np
import pytest
import torch

import vlabench.optimizations.closed_loop.train as train_module
from vlabench.measure.action_loops import EulerLoop
from vlabench.measure.dp_cache import parse_schedule
from vlabench.optimizations.closed_loop import (
    SmallFlowPolicy,
    TrainConfig,
    closed_loop_variants,
    expert_success_rate,
    load_or_train,
    success_rate,
)
from vlabench.optimizations.closed_loop.reacher import (
    collect_demonstrations,
    is_success,
    make_env,
    run_episode,
)
from vlabench.optimizations.closed_loop.train import checkpoint_path, train
from vlabench.optimizations.fidelity import FidelityVariant

pytest.importorskip("gymnasium")

TINY = TrainConfig(
    demo_episodes=4, width=16, heads=2, layers=1, prefix_tokens=2, mlp_ratio=1, train_steps=15, batch_size=32
)


@pytest.fixture(scope="module")
def tiny_policy() -> SmallFlowPolicy:
    return train(TINY)[0]


def test_scripted_expert_reaches_the_target():
    stats = expert_success_rate(episodes=20, seed=0)
    assert stats.success_rate >= 0.95
    assert stats.mean_final_distance_m < 0.005


def test_a_policy_that_does_nothing_mostly_fails():
    env = make_env()
    finals = [run_episode(env, lambda obs: np.zeros(2), seed) for seed in range(20)]
    assert sum(is_success(obs) for obs in finals) <= 4


def test_demonstrations_pair_each_step_with_the_next_expert_actions():
    demos = collect_demonstrations(episodes=2, seed=0, horizon=8)
    assert demos.observations.shape == (100, 10)
    assert demos.actions.shape == (100, 8, 2)
    assert np.abs(demos.actions).max() <= 1.0
    np.testing.assert_array_equal(demos.actions[:49, 1:], demos.actions[1:50, :-1])


def test_prefix_and_denoise_shapes():
    policy = SmallFlowPolicy(horizon=8, width=32, heads=4, layers=2, prefix_tokens=3)
    cache = policy.prefix(torch.randn(5, 10))
    assert cache.keys.shape == cache.values.shape == (2, 5, 4, 3, 8)
    assert cache.valid.shape == (5, 3)
    velocity = policy.denoise_step(torch.randn(5, 8, 2), torch.rand(5), cache)
    assert velocity.shape == (5, 8, 2)
    actions = EulerLoop(10, 5, torch.device("cpu")).sample(policy, cache, torch.randn(5, 8, 2))
    assert actions.shape == (5, 8, 2) and torch.isfinite(actions).all()


def test_training_is_deterministic(tiny_policy):
    again = train(TINY)[0]
    for name, tensor in tiny_policy.state_dict().items():
        assert torch.equal(tensor, again.state_dict()[name]), name


def test_success_rate_is_deterministic_for_a_fixed_seed(tiny_policy):
    variant = FidelityVariant(name="V-AEFusion s=3", stale_steps=3)
    first = success_rate(tiny_policy, variant, episodes=3, seed=7)
    assert first == success_rate(tiny_policy, variant, episodes=3, seed=7)
    assert first.episodes == 3 and 0 <= first.successes <= 3


def test_fusion_with_no_stale_steps_is_the_exact_loop(tiny_policy):
    exact = success_rate(tiny_policy, FidelityVariant(name="exact"), episodes=3, seed=1)
    fusion = success_rate(tiny_policy, FidelityVariant(name="V-AEFusion s=0", stale_steps=0), episodes=3, seed=1)
    assert replace(fusion, variant="exact") == exact


def test_expert_calls_follow_the_variant(tiny_policy):
    schedule = parse_schedule("{0,1,2,6,8,9}", 10)
    dp_cache = success_rate(tiny_policy, FidelityVariant(name="dp", dp_cache=schedule), episodes=1)
    assert dp_cache.expert_calls_per_chunk == 6
    combined = success_rate(tiny_policy, FidelityVariant(name="dp+s5", dp_cache=schedule, stale_steps=5), episodes=1)
    assert 6 < combined.expert_calls_per_chunk < 7  # step 5 starts the fresh cache, so it is always computed


def test_closed_loop_variants_cover_exact_dp_cache_fusion_and_combined():
    variants = closed_loop_variants(10)
    assert variants[0] == FidelityVariant(name="exact") and not any(v.fuse_expert_kv for v in variants)
    assert sorted(v.stale_steps for v in variants if v.dp_cache is None) == [0, 0, 3, 5, 7, 9]
    assert sum(v.dp_cache is not None and v.stale_steps == 0 for v in variants) == 2
    assert any(v.dp_cache is not None and v.stale_steps == 5 for v in variants)


def test_load_or_train_caches_the_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("VLABENCH_CACHE", str(tmp_path))
    config = replace(TINY, train_steps=3)
    trained = load_or_train(config=config)
    assert checkpoint_path(config).is_file()
    assert checkpoint_path(config).parent == tmp_path / "closed_loop"
    monkeypatch.setattr(train_module, "train", lambda *args: pytest.fail("retrained despite the cached weights"))
    loaded = load_or_train(config=config)
    for name, tensor in trained.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
