"""Train SmallFlowPolicy on scripted-expert demonstrations with the flow-matching loss; cache the weights.

x_t = t·noise + (1−t)·actions with t ~ U(0, 1), and the expert regresses the velocity noise − actions, matching
EulerLoop's integration from t = 1 (noise) to t = 0 (actions). Training is seeded and runs on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from vlabench.atomic import staging_file
from vlabench.backends.onnx_export import cache_root
from vlabench.optimizations.closed_loop.policy import SmallFlowPolicy
from vlabench.optimizations.closed_loop.reacher import collect_demonstrations

CHECKPOINT_FORMAT = 1  # bump when the policy, the expert or the training recipe changes


@dataclass(frozen=True)
class TrainConfig:
    """Everything the trained weights depend on; its hash names the cached checkpoint."""

    seed: int = 0
    demo_episodes: int = 500
    action_noise: float = 0.5
    horizon: int = 8
    width: int = 64
    heads: int = 4
    layers: int = 2
    prefix_tokens: int = 4
    mlp_ratio: int = 2
    denoise_steps: int = 10
    train_steps: int = 3000
    batch_size: int = 128
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4

    def key(self) -> str:
        """Short hash of the config and the checkpoint format."""
        identity = json.dumps({"format": CHECKPOINT_FORMAT, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(identity.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrainingSummary:
    """How the cached weights were made."""

    seconds: float
    final_loss: float  # mean flow-matching loss over the last 5% of steps
    samples: int
    steps: int


def build_policy(config: TrainConfig) -> SmallFlowPolicy:
    """An untrained policy with the config's architecture."""
    return SmallFlowPolicy(
        horizon=config.horizon,
        width=config.width,
        heads=config.heads,
        layers=config.layers,
        prefix_tokens=config.prefix_tokens,
        mlp_ratio=config.mlp_ratio,
        steps=config.denoise_steps,
    )


@contextmanager
def _threads(count: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train(config: TrainConfig, threads: int = 1) -> tuple[SmallFlowPolicy, TrainingSummary]:
    """Collect demonstrations and train from scratch; deterministic for a given config and thread count.

    One intra-op thread by default: the batches are small, and on a shared 2-core host two threads ran an order of
    magnitude slower than one."""
    start = time.perf_counter()
    demos = collect_demonstrations(config.demo_episodes, config.seed, config.horizon, config.action_noise)
    observations = torch.from_numpy(demos.observations)
    actions = torch.from_numpy(demos.actions)
    generator = torch.Generator().manual_seed(config.seed)
    with _threads(threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        policy = build_policy(config)
        policy.set_normalization(observations.mean(0), observations.std(0))
        optimizer = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
        warmup = max(1, config.train_steps // 20)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / config.train_steps)),
        )
        tail = max(1, config.train_steps // 20)
        tail_losses = []
        policy.train()
        for step in range(config.train_steps):
            index = torch.randint(len(demos), (config.batch_size,), generator=generator)
            target_actions = actions[index]
            noise = torch.randn(target_actions.shape, generator=generator)
            t = torch.rand(config.batch_size, generator=generator)
            x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * target_actions
            velocity = policy.denoise_step(x_t, t, policy.prefix(observations[index]))
            loss = F.mse_loss(velocity, noise - target_actions)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            if step >= config.train_steps - tail:
                tail_losses.append(loss.item())
    policy.eval()
    summary = TrainingSummary(
        seconds=time.perf_counter() - start,
        final_loss=sum(tail_losses) / len(tail_losses),
        samples=len(demos),
        steps=config.train_steps,
    )
    return policy, summary


def checkpoint_path(config: TrainConfig) -> Path:
    """Where the weights for ``config`` are cached (honors $VLABENCH_CACHE)."""
    return cache_root() / "closed_loop" / f"{config.key()}.pt"


def trained_policy(config: TrainConfig, threads: int = 1) -> tuple[SmallFlowPolicy, TrainingSummary]:
    """The cached policy for ``config`` and how it was trained; trains and caches it if absent."""
    path = checkpoint_path(config)
    if path.is_file():
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        policy = build_policy(config)
        policy.load_state_dict(checkpoint["state_dict"])
        return policy.eval(), TrainingSummary(**checkpoint["summary"])
    policy, summary = train(config, threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = staging_file(path.parent, ".partial-", ".pt")
    os.close(fd)
    try:
        torch.save({"config": asdict(config), "summary": asdict(summary), "state_dict": policy.state_dict()}, partial)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return policy, summary


def load_or_train(seed: int = 0, config: TrainConfig | None = None, threads: int = 1) -> SmallFlowPolicy:
    """The cached or freshly trained policy for ``config`` (default: ``TrainConfig(seed=seed)``)."""
    return trained_policy(config or TrainConfig(seed=seed), threads)[0]
