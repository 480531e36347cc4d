"""The messages between robots and a policy server: a JSON header and binary parts in one gRPC message. A request
carries one robot's camera frames as JPEG (as a robot would send them), its instruction and its state; a reply
carries the action chunk in robot units and where the server's time went."""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from vlabench.models.input_pipeline import RawObservation

JPEG_QUALITY = 90
HEADER = struct.Struct(">I")
MAX_HEADER_BYTES = 1 << 20


class WireError(ValueError):
    """A message that is not what the other side should have sent (the reason says what is wrong)."""


def pack(header: dict[str, Any], parts: list[bytes]) -> bytes:
    text = json.dumps({**header, "parts": [len(part) for part in parts]}).encode()
    return HEADER.pack(len(text)) + text + b"".join(parts)


def unpack(message: bytes) -> tuple[dict[str, Any], list[bytes]]:
    if len(message) < HEADER.size:
        raise WireError(f"a message of {len(message)} bytes has no header")
    (size,) = HEADER.unpack_from(message)
    if size > MAX_HEADER_BYTES or HEADER.size + size > len(message):
        raise WireError(f"a header of {size} bytes in a message of {len(message)} bytes")
    try:
        header = json.loads(message[HEADER.size : HEADER.size + size])
        lengths = [int(length) for length in header["parts"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"unreadable header: {exc}") from None
    offset, parts = HEADER.size + size, []
    for length in lengths:
        if length < 0 or offset + length > len(message):
            raise WireError("a part runs past the end of the message")
        parts.append(message[offset : offset + length])
        offset += length
    if offset != len(message):
        raise WireError(f"{len(message) - offset} bytes after the last part")
    return header, parts


def encode_request(robot: int, number: int, raw: RawObservation) -> bytes:
    """One robot's observation (a batch of one): each camera frame as JPEG, the state as float32."""
    if raw.frames.shape[0] != 1:
        raise ValueError("a request carries one robot's observation")
    frames = [jpeg(view) for view in raw.frames[0].numpy()]
    state = raw.state[0].to(torch.float32).numpy().tobytes()
    header = {"robot": robot, "number": number, "instruction": raw.instruction[0], "views": len(frames)}
    return pack(header, [*frames, state])


@dataclass(frozen=True)
class Request:
    robot: int
    number: int
    observation: RawObservation


def decode_request(message: bytes, views: int, frame_shape: tuple[int, int], state_dim: int) -> Request:
    """A request checked against what the served model takes (camera views, frame size, state length)."""
    header, parts = unpack(message)
    try:
        robot, number, sent_views = int(header["robot"]), int(header["number"]), int(header["views"])
        instruction = str(header["instruction"])
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"a request without {exc}") from None
    if sent_views != views or len(parts) != views + 1:
        raise WireError(f"the served model takes {views} camera views; the request has {sent_views}")
    frames = np.stack([unjpeg(part, frame_shape) for part in parts[:views]])
    state = np.frombuffer(parts[views], dtype=np.float32)
    if state.size != state_dim:
        raise WireError(f"the served model takes a state of {state_dim} values; the request has {state.size}")
    observation = RawObservation(
        frames=torch.from_numpy(frames).unsqueeze(0),
        instruction=[instruction],
        state=torch.from_numpy(state.copy()).unsqueeze(0),
    )
    return Request(robot, number, observation)


def jpeg(frame: np.ndarray) -> bytes:
    """An (H, W, 3) uint8 frame as JPEG."""
    out = io.BytesIO()
    Image.fromarray(frame).save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def unjpeg(data: bytes, shape: tuple[int, int]) -> np.ndarray:
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise WireError(f"a camera frame is not a readable JPEG: {exc}") from None
    if image.format != "JPEG" or image.mode != "RGB" or image.size != (shape[1], shape[0]):
        raise WireError(
            f"a camera frame is {image.format} {image.mode} {image.size[0]}x{image.size[1]}; the served model takes "
            f"JPEG RGB {shape[1]}x{shape[0]}"
        )
    return np.asarray(image)


def encode_reply(actions: torch.Tensor, timings: dict[str, float], batch_size: int) -> bytes:
    chunk = actions.to(torch.float32).contiguous().numpy()
    header = {"shape": list(chunk.shape), "batch_size": batch_size, **timings}
    return pack(header, [chunk.tobytes()])


@dataclass(frozen=True)
class Answer:
    actions: np.ndarray  # (chunk, action_dim) float32, robot units
    batch_size: int
    timings: dict[str, float]  # queue_ms, inference_ms, server_decode_ms, rows (computed), server_ms


def decode_reply(message: bytes) -> Answer:
    header, parts = unpack(message)
    try:
        shape = tuple(int(size) for size in header.pop("shape"))
        batch_size = int(header.pop("batch_size"))
        timings = {name: float(value) for name, value in header.items() if name != "parts"}
        actions = np.frombuffer(parts[0], dtype=np.float32).reshape(shape)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise WireError(f"an unreadable reply: {exc}") from None
    return Answer(actions, batch_size, timings)
