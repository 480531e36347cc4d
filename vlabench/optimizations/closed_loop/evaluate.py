"""Closed-loop task success of the exact loop and its accelerations (DP-Cache, V-AEFusion) on Reacher-v5.

Every ``actions_per_chunk`` environment steps one FusionLoop control cycle predicts a chunk from the current
observation and the first ``actions_per_chunk`` actions run open loop. The initial noise of a cycle is seeded from
(seed, episode, cycle) and episode e resets the environment with seed + e, so every variant sees the same noise
and the same targets: differences in success come from the acceleration alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from vlabench.measure.action_loops import EulerLoop
from vlabench.models.replicas import PrefixCache
from vlabench.optimizations.closed_loop.policy import SmallFlowPolicy
from vlabench.optimizations.closed_loop.reacher import (
    ACTION_DIM,
    EPISODE_STEPS,
    expert_action,
    is_success,
    make_env,
    run_episode,
    target_distance,
)
from vlabench.optimizations.fidelity import FidelityVariant, default_variants
from vlabench.optimizations.fusion import FusionLoop

EXPERT_VARIANT = "scripted expert"  # the row of the scripted expert, the ceiling the policy imitates


@dataclass(frozen=True)
class EpisodeStats:
    """Task success of one variant over seeded episodes."""

    variant: str
    episodes: int
    successes: int
    success_rate: float
    mean_final_distance_m: float  # metres
    expert_calls_per_chunk: float  # action-expert (denoise_step) calls per control cycle, measured


def closed_loop_variants(steps: int = 10) -> list[FidelityVariant]:
    """The shared fidelity variants this policy can run (lossless K/V fusion is a torch-replica kernel)."""
    return [variant for variant in default_variants(steps) if not variant.fuse_expert_kv]


class _CountingPolicy:
    """Forwards to the policy and counts action-expert calls."""

    def __init__(self, policy: SmallFlowPolicy) -> None:
        self.policy = policy
        self.calls = 0

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        self.calls += 1
        return self.policy.denoise_step(x_t, t, cache)


def cycle_noise(seed: int, episode: int, cycle: int, horizon: int) -> Tensor:
    """The initial noise (1, horizon, ACTION_DIM) of one control cycle, the same for every variant."""
    entropy = int(np.random.SeedSequence([seed, episode, cycle]).generate_state(1, np.uint64)[0])
    generator = torch.Generator().manual_seed(entropy)
    return torch.randn((1, horizon, ACTION_DIM), generator=generator)


def success_rate(
    policy: SmallFlowPolicy, variant: FidelityVariant, episodes: int = 50, seed: int = 0, actions_per_chunk: int = 4
) -> EpisodeStats:
    """Run ``episodes`` seeded episodes of the policy under ``variant``; count those that end on the target."""
    if not 0 < actions_per_chunk <= policy.horizon:
        raise ValueError(f"actions_per_chunk must be within 1..{policy.horizon}, got {actions_per_chunk}")
    device, dtype = policy.obs_mean.device, policy.obs_mean.dtype  # a bf16 policy takes bf16 inputs
    counter = _CountingPolicy(policy)
    env = make_env()
    successes, distances, cycles = 0, [], 0
    with torch.inference_mode():
        for episode in range(episodes):
            action_loop = EulerLoop(policy.steps, batch=1, device=device, schedule=variant.dp_cache)
            loop = FusionLoop(
                policy.prefix, counter, action_loop, policy.synchronize, variant.stale_steps, device, concurrent=False
            )
            obs, _ = env.reset(seed=seed + episode)
            try:
                for step in range(EPISODE_STEPS):
                    if step % actions_per_chunk == 0:
                        observation = torch.as_tensor(obs, dtype=torch.float32, device=device)[None].to(dtype)
                        noise = cycle_noise(seed, episode, step // actions_per_chunk, policy.horizon).to(device, dtype)
                        chunk, _ = loop.cycle(observation, noise)
                        chunk = chunk[0].float().clamp(-1.0, 1.0).cpu().numpy()
                        cycles += 1
                    obs, *_ = env.step(chunk[step % actions_per_chunk])
            finally:
                loop.close()
            successes += is_success(obs)
            distances.append(target_distance(obs))
    env.close()
    return EpisodeStats(
        variant=variant.name,
        episodes=episodes,
        successes=successes,
        success_rate=successes / episodes,
        mean_final_distance_m=float(np.mean(distances)),
        expert_calls_per_chunk=counter.calls / cycles,
    )


def expert_success_rate(episodes: int = 50, seed: int = 0) -> EpisodeStats:
    """The scripted expert on the same seeded episodes (the ceiling the policy imitates)."""
    env = make_env()
    finals = [run_episode(env, expert_action, seed + episode) for episode in range(episodes)]
    env.close()
    successes = sum(is_success(obs) for obs in finals)
    return EpisodeStats(
        variant=EXPERT_VARIANT,
        episodes=episodes,
        successes=successes,
        success_rate=successes / episodes,
        mean_final_distance_m=float(np.mean([target_distance(obs) for obs in finals])),
        expert_calls_per_chunk=0.0,
    )


def evaluate(
    policy: SmallFlowPolicy,
    variants: list[FidelityVariant],
    episodes: int = 50,
    seed: int = 0,
    actions_per_chunk: int = 4,
) -> list[EpisodeStats]:
    """The scripted expert followed by every variant, all on the same episodes."""
    return [
        expert_success_rate(episodes, seed),
        *(success_rate(policy, variant, episodes, seed, actions_per_chunk) for variant in variants),
    ]


def format_table(stats: list[EpisodeStats]) -> str:
    """A plain-text table of success rates."""
    width = max(len(s.variant) for s in stats)
    lines = [f"{'variant':<{width}}  success   rate  mean dist (m)  expert calls/chunk"]
    for s in stats:
        rate = f"{s.successes}/{s.episodes}"
        lines.append(
            f"{s.variant:<{width}}  {rate:>7}  {s.success_rate:>5.0%}  {s.mean_final_distance_m:>13.4f}"
            f"  {s.expert_calls_per_chunk:>18.1f}"
        )
    return "\n".join(lines)
