"""The messages between robots and a policy server: every family's observation survives the trip in every encoding
(frames exactly in PNG and raw, closely in JPEG; the instruction and the state exactly), and anything else is refused
with the reason, frames from their own header before a pixel is decoded."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from tests.support import recorded
from vlabench.commands.run import RobotObservations
from vlabench.models.input_pipeline import CAMERA_FRAME, raw_observation
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.serving.wire import (
    Contract,
    WireError,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    pack,
)


def single_row(model: str):
    workload = Workload.from_spec(load_model_spec(model))
    return workload, raw_observation(workload, seed=3)


def contract_of(workload: Workload, frame=CAMERA_FRAME) -> Contract:
    return Contract(workload.cameras * workload.frames, frame, workload.frames * workload.state_dim)


@pytest.mark.parametrize("model", recorded.TINY_MODELS)
def test_every_familys_observation_survives_the_trip(model):
    workload, raw = single_row(model)
    request = decode_request(encode_request(2, 7, raw), contract_of(workload))
    assert (request.robot, request.number) == (2, 7) and request.observation.instruction == raw.instruction
    assert torch.equal(request.observation.state, raw.state)
    assert request.observation.frames.shape == raw.frames.shape and request.observation.frames.dtype == torch.uint8
    # JPEG is lossy and the seeded frames are uniform noise, its worst case: the decoded frames are still much
    # closer to what was sent than to other noise (about 85 levels apart on average)
    error = (request.observation.frames.float() - raw.frames.float()).abs().mean()
    other = (raw_observation(workload, seed=4).frames.float() - raw.frames.float()).abs().mean()
    assert error < 0.65 * other


@pytest.mark.parametrize("encoding", ["png", "raw"])
def test_lossless_encodings_deliver_the_frames_exactly(encoding):
    workload, raw = single_row("smolvla-tiny")
    request = decode_request(encode_request(0, 0, raw, encoding), contract_of(workload))
    assert torch.equal(request.observation.frames, raw.frames)


def test_a_robots_camera_like_frame_is_a_small_jpeg_that_arrives_within_a_few_levels():
    workload = Workload.from_spec(load_model_spec("smolvla-tiny"))
    raw = RobotObservations(workload, seed=0).ensure(1)(0, 0)
    low, high = encode_request(0, 0, raw, "jpeg", 30), encode_request(0, 0, raw, "jpeg", 95)
    assert len(low) < len(high) < len(encode_request(0, 0, raw, "raw")) / 5  # quality trades bytes; far below raw
    request = decode_request(high, contract_of(workload))
    assert (request.observation.frames.float() - raw.frames.float()).abs().mean() < 4


def test_a_reply_carries_the_chunk_the_servers_times_its_batch_and_stamps():
    actions = torch.randn(50, 7)
    batch = {"number": 4, "start_ms": 1.0, "end_ms": 2.0, "size": 3, "rows": 4}
    answer = decode_reply(encode_reply(actions, {"queue_ms": 1.5, "inference_ms": 20.0}, 3, batch, [10, 20]))
    assert np.array_equal(answer.actions, actions.numpy()) and answer.batch_size == 3
    assert answer.timings == {"queue_ms": 1.5, "inference_ms": 20.0} and answer.batch == batch
    assert answer.stamps == (10, 20)
    actions[3, 2] = float("nan")
    with pytest.raises(WireError, match="non-finite actions"):
        decode_reply(encode_reply(actions, {}, 1, batch, [1, 2]))


def image_bytes(size: tuple[int, int], fmt: str, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, size).save(out, format=fmt)
    return out.getvalue()


STATE = np.zeros(6, dtype=np.float32).tobytes()
HEADER = {"robot": 0, "number": 0, "instruction": "pick", "views": 3, "encoding": "jpeg"}
JPEG = image_bytes((640, 480), "JPEG")


@pytest.mark.parametrize(
    "message, reason",
    [
        (b"", "no header"),
        (b"\x00\x00\x10\x00{}", "a header of 4096 bytes"),
        (struct.pack(">I", 2) + b"[]", "unreadable header"),
        (pack({"robot": 0}, []), "without a valid 'number'"),
        (pack({**HEADER, "robot": -1}, [JPEG] * 3 + [STATE]), "must be 0 ≤ x < 2\\*\\*31"),
        (pack({**HEADER, "robot": 2.5}, [JPEG] * 3 + [STATE]), "without a valid"),
        (pack({**HEADER, "instruction": "x" * 2000}, [JPEG] * 3 + [STATE]), "at most 1024 characters"),
        (pack({**HEADER, "encoding": "bmp"}, [JPEG] * 3 + [STATE]), "frames encoded as 'bmp'"),
        (pack({**HEADER, "views": 1}, [b"x", b"y"]), "takes 3 camera views; the request carries 1 frame"),
        # a frame missing: the reply counts the frames sent, not what the header claims
        (pack(HEADER, [JPEG, JPEG, STATE]), "carries 2 frame\\(s\\) \\(its header says 3\\)"),
        (pack(HEADER, [JPEG] * 5 + [STATE]), "at most 4 parts"),
        (pack(HEADER, [b"no", b"jpeg", b"here", STATE]), "not a readable JPEG"),
        (pack(HEADER, [image_bytes((640, 480), "PNG")] * 3 + [STATE]), "not a readable JPEG"),
        (pack(HEADER, [image_bytes((640, 480), "JPEG", "L")] * 3 + [STATE]), "JPEG L 640x480"),
        (pack({**HEADER, "encoding": "raw"}, [b"\x00" * 100] * 3 + [STATE]), "a raw frame of 100 bytes"),
        (pack({"robot": 0}, [b"abc"]) + b"tail", "bytes after the last part"),
    ],
)
def test_a_malformed_request_is_refused_with_the_reason(message, reason):
    with pytest.raises(WireError, match=reason):
        decode_request(message, Contract(3, CAMERA_FRAME, 6))


def test_a_decompression_bomb_is_refused_from_its_header_before_any_pixel_is_decoded(monkeypatch):
    """A 12000x12000 JPEG is 432 MB decoded: its size is read from its first bytes and it never reaches load()."""
    bomb = image_bytes((12000, 12000), "JPEG")
    assert len(bomb) < 3_000_000

    def never(self, *args, **kwargs):
        raise AssertionError("a frame of the wrong size was decoded")

    monkeypatch.setattr(Image.Image, "load", never)
    monkeypatch.setattr("PIL.ImageFile.ImageFile.load", never)
    with pytest.raises(WireError, match=r"12000x12000.*refused before decoding"):
        decode_request(pack(HEADER, [bomb] * 3 + [STATE]), Contract(3, CAMERA_FRAME, 6))


@pytest.mark.parametrize(
    "state, reason",
    [
        (b"\x00" * 13, "a state of 13 bytes is not float32 values"),
        (np.zeros(5, dtype=np.float32).tobytes(), "a state of 6 values; the request has 5"),
        (np.array([0, 0, np.nan, 0, 0, 0], dtype=np.float32).tobytes(), "state value 2 is nan"),
        (np.array([0, np.inf, 0, 0, 0, 0], dtype=np.float32).tobytes(), "state value 1 is inf"),
        (np.array([0, 0, 0, 0, 0, -3e38], dtype=np.float32).tobytes(), "state value 5 is -3e\\+38"),
    ],
)
def test_a_state_that_is_not_finite_float32_values_of_sane_magnitude_is_refused(state, reason):
    with pytest.raises(WireError, match=reason):
        decode_request(pack(HEADER, [JPEG] * 3 + [state]), Contract(3, CAMERA_FRAME, 6))


def test_a_frame_of_the_wrong_size_is_refused():
    workload, raw = single_row("smolvla-tiny")
    with pytest.raises(WireError, match="takes JPEG RGB 320x240"):
        decode_request(encode_request(0, 0, raw), contract_of(workload, (240, 320)))


def test_the_largest_request_the_server_reads_holds_raw_frames_and_no_more():
    workload, raw = single_row("smolvla")
    contract = contract_of(workload)
    assert (
        len(encode_request(0, 0, raw, "raw")) < contract.max_request_bytes < 2 * len(encode_request(0, 0, raw, "raw"))
    )
