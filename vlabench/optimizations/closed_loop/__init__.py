"""Closed-loop task success: action-expert accelerations on a small simulated task (MuJoCo Reacher-v5) with a small
flow policy of the VLA's two-phase structure; and a smolvla-family replica trained on Meta-World, judged under every
backend, precision and optimization (``metaworld``, ``metaworld_demos``, ``metaworld_training``, ``metaworld_eval``)."""

from vlabench.optimizations.closed_loop.evaluate import (
    EpisodeStats,
    closed_loop_variants,
    evaluate,
    expert_success_rate,
    format_table,
    success_rate,
)
from vlabench.optimizations.closed_loop.policy import SmallFlowPolicy
from vlabench.optimizations.closed_loop.train import TrainConfig, TrainingSummary, load_or_train, trained_policy

__all__ = [
    "EpisodeStats",
    "SmallFlowPolicy",
    "TrainConfig",
    "TrainingSummary",
    "closed_loop_variants",
    "evaluate",
    "expert_success_rate",
    "format_table",
    "load_or_train",
    "success_rate",
    "trained_policy",
]
