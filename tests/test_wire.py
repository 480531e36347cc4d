"""The messages between robots and a policy server: every family's observation survives the trip (frames through
JPEG, the instruction and the state exactly), and anything else is refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest
import recorded
import torch

from vlabench.models.input_pipeline import CAMERA_FRAME, raw_observation
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.serving.wire import WireError, decode_reply, decode_request, encode_reply, encode_request, pack


def single_row(model: str):
    workload = Workload.from_spec(load_model_spec(model))
    return workload, raw_observation(workload, seed=3)


@pytest.mark.parametrize("model", recorded.TINY_MODELS)
def test_every_familys_observation_survives_the_trip(model):
    workload, raw = single_row(model)
    views, state_values = workload.cameras * workload.frames, workload.frames * workload.state_dim
    request = decode_request(encode_request(2, 7, raw), views, CAMERA_FRAME, state_values)
    assert (request.robot, request.number) == (2, 7) and request.observation.instruction == raw.instruction
    assert torch.equal(request.observation.state, raw.state)
    assert request.observation.frames.shape == raw.frames.shape and request.observation.frames.dtype == torch.uint8
    # JPEG is lossy and the seeded frames are uniform noise, its worst case: the decoded frames are still much
    # closer to what was sent than to other noise (about 85 levels apart on average)
    error = (request.observation.frames.float() - raw.frames.float()).abs().mean()
    other = (raw_observation(workload, seed=4).frames.float() - raw.frames.float()).abs().mean()
    assert error < 0.65 * other


def test_a_camera_like_frame_arrives_within_a_few_levels():
    workload, raw = single_row("smolvla-tiny")
    rows = torch.arange(CAMERA_FRAME[0]).view(-1, 1, 1)
    cols = torch.arange(CAMERA_FRAME[1]).view(1, -1, 1)
    smooth = ((rows * 255 // CAMERA_FRAME[0] + cols * 255 // CAMERA_FRAME[1]) // 2 + torch.tensor([0, 30, 60])) % 256
    raw.frames[:] = smooth.to(torch.uint8)
    views, state_values = workload.cameras * workload.frames, workload.frames * workload.state_dim
    request = decode_request(encode_request(0, 0, raw), views, CAMERA_FRAME, state_values)
    assert (request.observation.frames.float() - raw.frames.float()).abs().mean() < 3


def test_a_reply_carries_the_chunk_and_the_servers_times():
    actions = torch.randn(50, 7)
    answer = decode_reply(encode_reply(actions, {"queue_ms": 1.5, "inference_ms": 20.0}, batch_size=3))
    assert np.array_equal(answer.actions, actions.numpy()) and answer.batch_size == 3
    assert answer.timings == {"queue_ms": 1.5, "inference_ms": 20.0}


@pytest.mark.parametrize(
    "message, reason",
    [
        (b"", "no header"),
        (b"\x00\x00\x10\x00{}", "a header of 4096 bytes"),
        (pack({"robot": 0}, []), "without 'number'"),
        (pack({"robot": 0, "number": 0, "instruction": "x", "views": 1}, [b"x", b"y"]), "takes 3 camera views"),
        (pack({"robot": 0, "number": 0, "instruction": "x", "views": 3}, [b"no", b"jpeg", b"here", b""]), "JPEG"),
        (pack({"robot": 0}, [b"abc"]) + b"tail", "bytes after the last part"),
    ],
)
def test_a_malformed_request_is_refused_with_the_reason(message, reason):
    with pytest.raises(WireError, match=reason):
        decode_request(message, 3, CAMERA_FRAME, 6)


def test_a_frame_of_the_wrong_size_or_a_wrong_state_is_refused():
    workload, raw = single_row("smolvla-tiny")
    views, state_values = workload.cameras * workload.frames, workload.frames * workload.state_dim
    with pytest.raises(WireError, match="takes JPEG RGB 320x240"):
        decode_request(encode_request(0, 0, raw), views, (240, 320), state_values)
    with pytest.raises(WireError, match=f"a state of {state_values + 1} values"):
        decode_request(encode_request(0, 0, raw), views, CAMERA_FRAME, state_values + 1)
