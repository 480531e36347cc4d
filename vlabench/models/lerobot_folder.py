"""A lerobot ``pretrained_model`` folder beyond its weights: the dataset statistics and the tokenizer a trained
policy needs around the model, read (and written, for policies vlabench trains) in lerobot's own layout.

lerobot (≥ 0.4) saves each processor pipeline as ``policy_preprocessor.json`` / ``policy_postprocessor.json``, a list
of steps by ``registry_name``; a step with state points at its ``state_file``, a safetensors file of flat
``<feature>.<statistic>`` tensors (``observation.state.mean``, ``action.std``, ...). The normalizer step of the
preprocessor holds the state's statistics, the unnormalizer step of the postprocessor the actions'. The weights
themselves (``model.safetensors``) load through ``checkpoints.load_checkpoint``, the path every ``--checkpoint``
takes. A tokenizer the policy was trained with is a Hugging Face ``tokenizers`` file, ``tokenizer.json``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlabench.atomic import file_mode, staging_folder
from vlabench.errors import InputError
from vlabench.models.checkpoints import WEIGHTS_FILE, Renames, open_safetensors
from vlabench.models.input_pipeline import Normalization

PREPROCESSOR = "policy_preprocessor.json"
POSTPROCESSOR = "policy_postprocessor.json"
NORMALIZER = "normalizer_processor"
UNNORMALIZER = "unnormalizer_processor"
TOKENIZER_FILE = "tokenizer.json"
STATE, ACTION = "observation.state", "action"
STD_FLOOR = 1e-2
"""Statistics written here floor each standard deviation (a state value constant in the data, e.g. an absent
object's padding, would otherwise scale the smallest deviation from it without bound); lerobot's
``(x - mean) / (std + 1e-8)`` and vlabench's ``(x - mean) / std`` then agree to 1e-6."""


def _step_state(folder: Path, pipeline: str, registry_name: str) -> dict[str, torch.Tensor]:
    """The tensors of the ``registry_name`` step of ``folder/pipeline``."""
    path = folder / pipeline
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"checkpoint {folder}: no {pipeline} (a trained policy's lerobot processor file)") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"checkpoint {folder}: {pipeline} is not readable JSON: {exc}") from None
    steps = document.get("steps") if isinstance(document, dict) else None
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict) and step.get("registry_name") == registry_name and step.get("state_file"):
            state_file = folder / Path(str(step["state_file"])).name
            if not state_file.is_file():
                raise InputError(f"checkpoint {folder}: {pipeline} names {state_file.name}, which is missing")
            with open_safetensors(state_file) as handle:
                return {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    raise InputError(f"checkpoint {folder}: {pipeline} has no {registry_name} step with a state file")


def _statistics(state: dict[str, torch.Tensor], feature: str, source: str) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        mean, std = state[f"{feature}.mean"].float(), state[f"{feature}.std"].float()
    except KeyError:
        raise InputError(f"{source}: no {feature}.mean and {feature}.std (MEAN_STD statistics)") from None
    if mean.shape != std.shape or not (torch.isfinite(mean).all() and torch.isfinite(std).all()) or (std <= 0).any():
        raise InputError(f"{source}: {feature} statistics must be finite, of one shape, with positive std")
    return mean, std


def read_normalization(folder: Path, state_dim: int, action_dim: int) -> Normalization:
    """The state statistics of the preprocessor's normalizer and the action statistics of the postprocessor's
    unnormalizer; InputError when absent, malformed, or not of the model's widths."""
    state_mean, state_std = _statistics(_step_state(folder, PREPROCESSOR, NORMALIZER), STATE, str(folder))
    action_mean, action_std = _statistics(_step_state(folder, POSTPROCESSOR, UNNORMALIZER), ACTION, str(folder))
    if state_mean.shape != (state_dim,) or action_mean.shape != (action_dim,):
        raise InputError(
            f"checkpoint {folder}: statistics for a {tuple(state_mean.shape)} state and {tuple(action_mean.shape)} "
            f"action; the model reads a ({state_dim},) state and writes ({action_dim},) actions"
        )
    return Normalization(state_mean, state_std, action_mean, action_std)


def read_tokenizer(folder: Path, length: int) -> Any:
    """The policy's ``tokenizer.json`` padding and truncating to ``length`` tokens."""
    from tokenizers import Tokenizer

    path = folder / TOKENIZER_FILE
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception type for every failure
        raise InputError(f"checkpoint {folder}: {TOKENIZER_FILE} is missing or unreadable: {exc}") from None
    pad = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=0 if pad is None else pad, pad_token="[PAD]", length=length)
    tokenizer.enable_truncation(max_length=length)
    return tokenizer


def lerobot_key(name: str, renames: Renames, layout: str) -> str:
    """The lerobot name of replica weight ``name`` in the ``layout`` checkpoint family (e.g.
    ``model.vlm_with_expert.``): the rule with the most specific replica prefix wins (``language_model.lm_head.``
    over ``language_model.``), as lerobot's module tree names it."""
    rules = [(source, target) for source, target in renames if source.startswith(layout) or source == "model."]
    matching = [(source, target) for source, target in rules if name.startswith(target)]
    if not matching:
        raise KeyError(name)
    source, target = max(matching, key=lambda rule: len(rule[1]))
    return source + name[len(target) :]


def _pipeline(name: str, registry_name: str, state_file: str, features: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "steps": [
            {
                "registry_name": registry_name,
                "config": {"eps": 1e-8, "features": features, "norm_map": {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}},
                "state_file": state_file,
            }
        ],
    }


def save_policy_folder(
    model: nn.Module, folder: Path, layout: str, normalization: Normalization, tokenizer: Any, files: dict[str, Any]
) -> Path:
    """Write ``folder`` whole or not at all: the weights under lerobot's names, the normalizer and unnormalizer
    steps, the tokenizer and ``files`` (name → JSON document, e.g. ``config.json``)."""
    from safetensors.torch import save_file

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(folder.parent, ".partial-")
    try:
        renames = type(model).LEROBOT_RENAMES
        weights = {
            lerobot_key(k, renames, layout): v.detach().float().contiguous() for k, v in model.state_dict().items()
        }
        save_file(weights, str(staging / WEIGHTS_FILE))
        steps = {
            PREPROCESSOR: (NORMALIZER, STATE, normalization.state_mean, normalization.state_std),
            POSTPROCESSOR: (UNNORMALIZER, ACTION, normalization.action_mean, normalization.action_std),
        }
        for pipeline, (registry_name, feature, mean, std) in steps.items():
            state_file = f"{pipeline.removesuffix('.json')}_step_0_{registry_name}.safetensors"
            save_file(
                {f"{feature}.mean": mean.float().contiguous(), f"{feature}.std": std.float().contiguous()},
                str(staging / state_file),
            )
            shape = {"type": "STATE" if feature == STATE else "ACTION", "shape": list(mean.shape)}
            document = _pipeline(pipeline.removesuffix(".json"), registry_name, state_file, {feature: shape})
            (staging / pipeline).write_text(json.dumps(document, indent=2) + "\n")
        tokenizer.save(str(staging / TOKENIZER_FILE))
        for name, document in files.items():
            (staging / name).write_text(json.dumps(document, indent=2) + "\n")
        for written in staging.iterdir():
            written.chmod(file_mode())  # safetensors writes 0600; the folder is shipped like any other file
        if folder.exists():
            retired = staging_folder(folder.parent, ".partial-")
            os.replace(folder, retired / folder.name)
            os.replace(staging, folder)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def trained_checkpoint(spec: Any) -> Path | None:
    """The folder of the weights vlabench trained for ``spec`` (package data under ``profiles/``), or None."""
    if spec.trained is None:
        return None
    from importlib import resources

    folder = Path(str(resources.files("vlabench.profiles").joinpath(spec.trained.checkpoint)))
    if not (folder / "model.safetensors").is_file():
        raise InputError(
            f"{spec.name}: its trained checkpoint {folder} is missing; retrain it: {spec.trained.training}"
        )
    return folder
