"""Train the Meta-World reference policy (``smolvla-metaworld-tiny``) and write its lerobot-layout checkpoint.

    MUJOCO_GL=egl python3 benchmarks/capture.py --artifact benchmarks/results/metaworld-training.json --stdout -- \\
        nice -n 10 python3 benchmarks/train_metaworld.py --json

Scripted demonstrations of the five default tasks, then behaviour cloning of the smolvla-family replica
(``vlabench.optimizations.closed_loop.metaworld_training``), seeded: the same config and thread count give the same
weights. The checkpoint folder (``--out``, default the packaged ``profiles/checkpoints/smolvla-metaworld-tiny``)
holds ``model.safetensors`` under lerobot's names, the normalizer/unnormalizer processor files, the tokenizer, a
lerobot-style ``config.json`` and ``training.json``: the config, the tasks, the data's sha256, the loss curve, the
wall time of each part, the threads, the CPU model and flags and the load average before and after. ``--json``
prints that record (the committed ``benchmarks/results/metaworld-training.json``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from capture import cpu_info, load_average, tree_state

from vlabench.atomic import atomic_write_text
from vlabench.models.lerobot_folder import save_policy_folder
from vlabench.models.specs import load_model_spec
from vlabench.optimizations.closed_loop.metaworld import DEFAULT_TASKS
from vlabench.optimizations.closed_loop.metaworld_training import TrainingConfig, train

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = "model.vlm_with_expert."  # lerobot's SmolVLA checkpoint names


def lerobot_config(spec, record) -> dict:
    """The policy config in lerobot's SmolVLAConfig names, for the fields that describe this model."""
    action, size = spec.action, spec.vision.image_size
    return {
        "type": "smolvla",
        "n_obs_steps": 1,
        "chunk_size": action.chunk,
        "n_action_steps": action.actions_per_chunk,
        "num_steps": action.steps,
        "max_state_dim": action.state_dim,
        "max_action_dim": action.action_dim,
        "resize_imgs_with_padding": [size, size],
        "tokenizer_max_length": spec.language_tokens,
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "input_features": {
            f"observation.images.{record.camera}": {"type": "VISUAL", "shape": [3, size, size]},
            "observation.state": {"type": "STATE", "shape": [action.state_dim]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [action.action_dim]}},
        "vlabench_model": spec.name,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = TrainingConfig()
    parser.add_argument("--out", type=Path, default=ROOT / "profiles" / "checkpoints" / defaults.model)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: fastest on a busy host)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--episodes", type=int, default=defaults.episodes, help="demonstrated episodes per task")
    parser.add_argument("--steps", type=int, default=defaults.train_steps, help="optimizer steps")
    parser.add_argument("--json", action="store_true", help="print the training record as JSON on stdout")
    args = parser.parse_args()
    config = replace(defaults, seed=args.seed, episodes=args.episodes, train_steps=args.steps)
    load_before, started, tree = load_average(), time.perf_counter(), tree_state()  # the code that trains
    result = train(config, DEFAULT_TASKS, args.threads, progress=lambda line: print(line, file=sys.stderr, flush=True))
    record = {
        **asdict(result.record),
        "final_loss": result.record.final_loss,
        "wall_s": round(time.perf_counter() - started, 1),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "cpu": cpu_info(),
        **tree,
    }
    spec = load_model_spec(config.model)
    files = {"config.json": lerobot_config(spec, result.record), "training.json": record}
    folder = save_policy_folder(result.model, args.out, LAYOUT, result.normalization, result.tokenizer, files)
    weights = folder / "model.safetensors"
    record["checkpoint"] = {
        "folder": str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder),
        "bytes": weights.stat().st_size,
        "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
    }
    atomic_write_text(folder / "training.json", json.dumps(record, indent=2) + "\n")
    print(f"checkpoint: {folder} ({record['wall_s']} s, final loss {record['final_loss']:.4f})", file=sys.stderr)
    if args.json:
        print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
