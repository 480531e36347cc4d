"""``python -m vlabench.optimizations.closed_loop``: train (or load) the policy, then print closed-loop success
per variant."""

from __future__ import annotations

import argparse

import torch

from vlabench.optimizations.closed_loop.evaluate import closed_loop_variants, evaluate, format_table
from vlabench.optimizations.closed_loop.train import TrainConfig, checkpoint_path, trained_policy


def main(argv: list[str] | None = None) -> None:
    """Parse the options, train or load, evaluate every default variant and print the table."""
    parser = argparse.ArgumentParser(prog="python -m vlabench.optimizations.closed_loop", description=__doc__)
    parser.add_argument("--train-seed", type=int, default=0, help="seed of the demonstrations and the weights")
    parser.add_argument("--episodes", type=int, default=50, help="evaluation episodes per variant")
    parser.add_argument("--seed", type=int, default=0, help="episode e resets with seed + e")
    parser.add_argument("--actions-per-chunk", type=int, default=4, help="actions executed per control cycle")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = TrainConfig(seed=args.train_seed)
    policy, summary = trained_policy(config, args.threads)
    print(f"policy {checkpoint_path(config)}: trained in {summary.seconds:.0f} s on {summary.samples} samples")
    print(f"  {summary.steps} steps, final flow-matching loss {summary.final_loss:.4f}")
    stats = evaluate(policy, closed_loop_variants(policy.steps), args.episodes, args.seed, args.actions_per_chunk)
    print(format_table(stats))


if __name__ == "__main__":
    main()
