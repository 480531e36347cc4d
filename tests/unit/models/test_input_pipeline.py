"""The input pipeline (``models.input_pipeline``): raw robot observations become what every family's replica takes,
as lerobot's processors make them (the timed run is in tests/integration/models/test_input_pipeline_run.py)."""

from __future__ import annotations

import pytest
import torch

from tests.support import recorded
from vlabench.models.input_pipeline import (
    CAMERA_FRAME,
    IMAGENET_MEAN,
    IMAGENET_STD,
    INSTRUCTIONS,
    InputPipeline,
    raw_observation,
)
from vlabench.models.replicas import build_replica
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, synthetic_observation

FAMILIES = recorded.TINY_MODELS
CPU = torch.device("cpu")


def pipeline_for(name: str, dtype: torch.dtype = torch.float32) -> tuple[InputPipeline, Workload]:
    spec = load_model_spec(name)
    workload = Workload.from_spec(spec)
    return InputPipeline(spec, workload, 0, dtype, CPU), workload


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_gets_what_its_replica_takes(name):
    spec = load_model_spec(name)
    pipeline, workload = pipeline_for(name)
    obs = pipeline.preprocess(raw_observation(workload, 3))
    reference = synthetic_observation(spec, workload, 3, torch.float32, CPU)
    for field in ("images", "language_tokens", "language_mask", "state"):
        made, expected = getattr(obs, field), getattr(reference, field)
        assert made.shape == expected.shape and made.dtype == expected.dtype, field
        # the same memory layout too: a policy compiled on synthetic inputs guards on strides, and a pipelined input
        # laid out otherwise is recompiled on its first call, outside the settings its preparation compiled under
        assert made.stride() == expected.stride(), field
    if workload.language_tokens:
        assert int(obs.language_tokens.min()) >= 0 and int(obs.language_tokens.max()) < spec.token_vocab
        assert 0 < int(obs.language_mask.sum()) <= workload.language_tokens
        assert (obs.language_tokens[~obs.language_mask] == 0).all()  # padding id
    model = build_replica(spec, 0, torch.float32, CPU)
    with torch.inference_mode():
        model.prefill(obs, model.embed_images(obs.images))  # the replica accepts it


@pytest.mark.parametrize("name", ["smolvla-tiny", "pi0-tiny"])
def test_symmetric_range_and_resize_with_pad_keep_the_aspect_ratio(name):
    pipeline, workload = pipeline_for(name)
    raw = raw_observation(workload, 0)
    images = pipeline.preprocess(raw).images[0, 0]
    size = workload.image_size
    inner_rows = round(CAMERA_FRAME[0] * size / CAMERA_FRAME[1])  # 480×640 fits the square by its width
    assert images.min() >= -1.0 and images.max() <= 1.0
    assert (images[:, inner_rows:, :] == -1.0).all()  # padded below with black, at -1
    assert (images[:, :inner_rows, :] > -0.5).all()  # the frame (random pixels, averaged down) fills the rest


def test_imagenet_families_are_standardized_with_imagenet_statistics():
    pipeline, workload = pipeline_for("act-tiny")
    raw = raw_observation(workload, 0)
    raw.frames.zero_()
    images = pipeline.preprocess(raw).images[0, 0]
    expected = -torch.tensor(IMAGENET_MEAN) / torch.tensor(IMAGENET_STD)
    assert torch.allclose(images.mean(dim=(1, 2)), expected, atol=1e-5)


def test_state_is_normalized_and_actions_unnormalized_with_the_same_statistics():
    pipeline, workload = pipeline_for("pi0-tiny")
    raw = raw_observation(workload, 0)
    state = pipeline.preprocess(raw).state
    assert torch.allclose(state * pipeline.state_std + pipeline.state_mean, raw.state, atol=1e-5)
    normalized = torch.randn(1, workload.chunk, workload.action_dim)
    actions = pipeline.postprocess(normalized)
    assert torch.allclose((actions - pipeline.action_mean) / pipeline.action_std, normalized, atol=1e-5)
    assert not torch.allclose(actions, normalized)


def test_the_instruction_is_tokenized_and_padded_to_the_prompt_length():
    pipeline, workload = pipeline_for("smolvla-tiny")
    short, long = raw_observation(workload, 0), raw_observation(workload, 0)
    long.instruction = [" ".join(INSTRUCTIONS)]  # far longer than the prompt: truncated
    short_tokens = pipeline.preprocess(short).language_mask.sum()
    long_mask = pipeline.preprocess(long).language_mask
    assert long_mask.all() and long_mask.shape[-1] == workload.language_tokens
    assert 0 < short_tokens < workload.language_tokens
    assert raw_observation(workload, 0).instruction != raw_observation(workload, 1).instruction


def test_preprocessing_happens_at_the_run_dtype():
    pipeline, workload = pipeline_for("smolvla-tiny", torch.bfloat16)
    obs = pipeline.preprocess(raw_observation(workload, 0))
    assert obs.images.dtype == torch.bfloat16 and obs.state.dtype == torch.bfloat16
