"""A lerobot checkpoint folder beyond the weights: the processors' statistics and the tokenizer, written for a policy
vlabench trains and read back; the weights under the names lerobot itself writes (the real file's header)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from vlabench.commands.run import plan_run
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.models.checkpoints import load_checkpoint
from vlabench.models.input_pipeline import Normalization
from vlabench.models.lerobot_folder import (
    POSTPROCESSOR,
    PREPROCESSOR,
    lerobot_key,
    read_normalization,
    read_tokenizer,
    save_policy_folder,
)
from vlabench.models.replicas import FlowMatchingVLA, build_replica
from vlabench.models.specs import load_model_spec
from vlabench.optimizations.closed_loop.metaworld import DEFAULT_TASKS
from vlabench.optimizations.closed_loop.metaworld_training import instruction_tokenizer

FIXTURE = Path("/work/shared/fixtures/lerobot_smolvla_safetensors_header.json")
CPU = torch.device("cpu")
MODEL = "smolvla-metaworld-tiny"


def _layered(names) -> set[str]:
    return {re.sub(r"\.\d+\.", ".N.", name) for name in names}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    spec = load_model_spec(MODEL)
    model = build_replica(spec, 3, torch.float32, CPU)
    stats = Normalization(torch.arange(39.0), torch.full((39,), 2.0), torch.zeros(4), torch.full((4,), 0.5))
    tokenizer = instruction_tokenizer(DEFAULT_TASKS, spec.llm.vocab, spec.language_tokens)
    target = tmp_path_factory.mktemp("policy") / "pretrained_model"
    return save_policy_folder(model, target, "model.vlm_with_expert.", stats, tokenizer, {"config.json": {"a": 1}})


@pytest.mark.skipif(not FIXTURE.is_file(), reason="the lerobot header fixture is not on this machine")
def test_the_weights_carry_the_names_lerobot_writes_for_smolvla(folder):
    from safetensors import safe_open

    real = json.loads(FIXTURE.read_text())["tensors"]
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        written = list(handle.keys())
    assert _layered(written) == _layered(real)  # the same modules, layer for layer, as lerobot 0.4.4 saves
    assert "model.vlm_with_expert.vlm.lm_head.weight" in written


def test_the_folder_loads_through_the_checkpoint_loader_filling_every_weight(folder):
    plan = plan_run(RunConfig(model=MODEL, checkpoint=folder, energy_meter="none"))
    model = FlowMatchingVLA(plan.spec)
    report = load_checkpoint(model, folder)
    assert report.loaded == len(model.state_dict()) and report.unexpected == [] and report.ignored == 0
    source = build_replica(load_model_spec(MODEL), 3, torch.float32, CPU)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in source.state_dict().items())


def test_statistics_and_tokenizer_read_back(folder):
    stats = read_normalization(folder, 39, 4)
    assert torch.equal(stats.state_mean, torch.arange(39.0)) and torch.equal(stats.action_std, torch.full((4,), 0.5))
    tokenizer = read_tokenizer(folder, 12)
    encoded = [tokenizer.encode(text) for text in DEFAULT_TASKS.instructions.values()]
    assert all(len(e.ids) == 12 for e in encoded)
    assert len({tuple(e.ids) for e in encoded}) == len(encoded)  # every instruction tells its task apart
    assert all("[UNK]" not in e.tokens for e in encoded)


def test_the_keys_prefer_the_most_specific_rule():
    renames = FlowMatchingVLA.LEROBOT_RENAMES
    assert lerobot_key("language_model.lm_head.weight", renames, "model.vlm_with_expert.") == (
        "model.vlm_with_expert.vlm.lm_head.weight"
    )
    assert lerobot_key("state_proj.bias", renames, "model.vlm_with_expert.") == "model.state_proj.bias"


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    target.mkdir()
    for file in folder.iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    return target


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (f / PREPROCESSOR).unlink(), "no policy_preprocessor.json"),
        (lambda f: (f / PREPROCESSOR).write_text("{not json"), "not readable JSON"),
        (lambda f: (f / PREPROCESSOR).write_text(json.dumps({"steps": []})), "no normalizer_processor step"),
        (lambda f: next(f.glob("policy_postprocessor_step_*")).unlink(), "which is missing"),
        (
            lambda f: save_file(
                {"observation.state.mean": torch.zeros(39), "observation.state.std": torch.zeros(39)},
                str(next(f.glob("policy_preprocessor_step_*"))),
            ),
            "positive std",
        ),
        (
            lambda f: save_file(
                {"action.mean": torch.zeros(7), "action.std": torch.ones(7)},
                str(next(f.glob("policy_postpro*.safetensors"))),
            ),
            "writes \\(4,\\) actions",
        ),
        (lambda f: (f / POSTPROCESSOR).write_text(json.dumps([1, 2])), "no unnormalizer_processor step"),
    ],
)
def test_a_damaged_folder_is_a_clear_error(folder, tmp_path, damage, message):
    copy = _copy(folder, tmp_path)
    damage(copy)
    with pytest.raises(InputError, match=message):
        read_normalization(copy, 39, 4)


def test_a_missing_tokenizer_is_a_clear_error(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    (copy / "tokenizer.json").unlink()
    with pytest.raises(InputError, match=r"tokenizer\.json is missing or unreadable"):
        read_tokenizer(copy, 12)


def test_rewriting_a_folder_replaces_it_whole(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    (copy / "stale.txt").write_text("from an older training")
    spec = load_model_spec(MODEL)
    stats = read_normalization(folder, 39, 4)
    tokenizer = read_tokenizer(folder, 12)
    save_policy_folder(build_replica(spec, 4, torch.float32, CPU), copy, "model.vlm_with_expert.", stats, tokenizer, {})
    assert not (copy / "stale.txt").exists() and (copy / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["copy"]  # no staging debris left beside it
