"""The messages between robots and a policy server: a JSON header and binary parts in one gRPC message. A request
carries one robot's camera frames (JPEG, PNG or raw RGB, as a robot would send them), its instruction and its state;
a reply carries the action chunk in robot units, where the server's time went, the batch that served it and the
server's two timestamps (received, sent back).

Nothing is trusted: the header is bounded and checked before any part is read, each frame's format and size are read
from its own header before a pixel is decoded (a 12000x12000 JPEG is refused from its first bytes), and the state
must be finite float32 values of a sane magnitude, so no robot can put NaN, inf or 3e38 into a shared batch."""

from __future__ import annotations

import io
import json
import math
import struct
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image

from vlabench.models.input_pipeline import RawObservation

Encoding = Literal["jpeg", "png", "raw"]
ENCODINGS: tuple[Encoding, ...] = ("jpeg", "png", "raw")
PIL_FORMATS = {"jpeg": "JPEG", "png": "PNG"}
JPEG_QUALITY = 90
PNG_COMPRESS_LEVEL = 1
"""A robot compresses fast (zlib level 1), not small."""
HEADER = struct.Struct(">I")
MAX_HEADER_BYTES = 64 << 10
MAX_PARTS = 1024
MAX_INSTRUCTION_CHARS = 1024
MAX_ID = 2**31
STATE_LIMIT = 1e6
"""A state value in robot units (joint angles, positions, gripper widths) is far below this; beyond it is garbage."""


class WireError(ValueError):
    """A message that is not what the other side should have sent (the reason says what is wrong)."""


def pack(header: dict[str, Any], parts: list[bytes]) -> bytes:
    text = json.dumps({**header, "parts": [len(part) for part in parts]}).encode()
    return HEADER.pack(len(text)) + text + b"".join(parts)


def unpack(message: bytes, max_parts: int = MAX_PARTS) -> tuple[dict[str, Any], list[bytes]]:
    if len(message) < HEADER.size:
        raise WireError(f"a message of {len(message)} bytes has no header")
    (size,) = HEADER.unpack_from(message)
    if size > MAX_HEADER_BYTES or HEADER.size + size > len(message):
        raise WireError(f"a header of {size} bytes in a message of {len(message)} bytes")
    try:
        header = json.loads(message[HEADER.size : HEADER.size + size])
        lengths = header["parts"]
        if not isinstance(header, dict) or not isinstance(lengths, list) or len(lengths) > max_parts:
            raise ValueError(f"at most {max_parts} parts, listed")
        lengths = [_whole(length) for length in lengths]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
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


def _whole(value: Any) -> int:
    if type(value) is not int:
        raise ValueError(f"{value!r} is not a whole number")
    return value


def encode_frame(frame: np.ndarray, encoding: Encoding, quality: int = JPEG_QUALITY) -> bytes:
    """An (H, W, 3) uint8 frame as the robot sends it."""
    if encoding == "raw":
        return np.ascontiguousarray(frame, dtype=np.uint8).tobytes()
    out = io.BytesIO()
    image = Image.fromarray(frame)
    if encoding == "jpeg":
        image.save(out, format="JPEG", quality=quality)
    else:
        image.save(out, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return out.getvalue()


def encode_request(
    robot: int, number: int, raw: RawObservation, encoding: Encoding = "jpeg", quality: int = JPEG_QUALITY
) -> bytes:
    """One robot's observation (a batch of one): each camera frame encoded, the state as float32."""
    if raw.frames.shape[0] != 1:
        raise ValueError("a request carries one robot's observation")
    frames = [encode_frame(view, encoding, quality) for view in raw.frames[0].numpy()]
    state = raw.state[0].to(torch.float32).numpy().tobytes()
    header = {
        "robot": robot,
        "number": number,
        "instruction": raw.instruction[0],
        "views": len(frames),
        "encoding": encoding,
    }
    return pack(header, [*frames, state])


@dataclass(frozen=True)
class Request:
    robot: int
    number: int
    observation: RawObservation


@dataclass(frozen=True)
class Contract:
    """What a request must carry for the served model: camera views, frame size (H, W), state length."""

    views: int
    frame_shape: tuple[int, int]
    state_values: int

    @property
    def max_request_bytes(self) -> int:
        """The largest request the server reads: raw frames (a JPEG or PNG of them is at most a little larger),
        the state and a header."""
        height, width = self.frame_shape
        frame = height * width * 3
        return self.views * (frame + frame // 4 + 4096) + self.state_values * 4 + MAX_HEADER_BYTES + HEADER.size


def decode_request(message: bytes, contract: Contract) -> Request:
    """A request checked against what the served model takes, every frame from its own header before decoding."""
    header, parts = unpack(message, contract.views + 1)
    try:
        robot, number, sent_views = (_whole(header[name]) for name in ("robot", "number", "views"))
        instruction, encoding = header["instruction"], header.get("encoding", "jpeg")
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"a request without a valid {exc}") from None
    if not (0 <= robot < MAX_ID and 0 <= number < MAX_ID):
        raise WireError(f"robot {robot} and request {number} must be 0 ≤ x < 2**31")
    if not isinstance(instruction, str) or len(instruction) > MAX_INSTRUCTION_CHARS:
        raise WireError(f"the instruction must be text of at most {MAX_INSTRUCTION_CHARS} characters")
    if encoding not in ENCODINGS:
        raise WireError(f"frames encoded as {encoding!r}; the server reads {', '.join(ENCODINGS)}")
    frames = parts[:-1] if parts else []
    if sent_views != contract.views or len(frames) != contract.views:
        raise WireError(
            f"the served model takes {contract.views} camera views; the request carries {len(frames)} frame(s) "
            f"(its header says {sent_views})"
        )
    pixels = np.stack([decode_frame(part, encoding, contract.frame_shape) for part in frames])
    state = decode_state(parts[-1], contract.state_values)
    observation = RawObservation(
        frames=torch.from_numpy(pixels).unsqueeze(0),
        instruction=[instruction],
        state=torch.from_numpy(state).unsqueeze(0),
    )
    return Request(robot, number, observation)


def decode_frame(data: bytes, encoding: Encoding, shape: tuple[int, int]) -> np.ndarray:
    """One frame: its size and format read from its header first; pixels decoded only for the served size."""
    height, width = shape
    if encoding == "raw":
        if len(data) != height * width * 3:
            raise WireError(f"a raw frame of {len(data)} bytes; the served model takes {width}x{height} RGB")
        return np.frombuffer(data, dtype=np.uint8).reshape(height, width, 3)
    expected = PIL_FORMATS[encoding]
    try:
        image = Image.open(io.BytesIO(data), formats=[expected])
    except Exception as exc:  # any decoder complaint: the frame is not what it claims
        raise WireError(f"a camera frame is not a readable {expected}: {type(exc).__name__}") from None
    if image.mode != "RGB" or image.size != (width, height):
        raise WireError(
            f"a camera frame is {expected} {image.mode} {image.size[0]}x{image.size[1]}; the served model takes "
            f"{expected} RGB {width}x{height} (refused before decoding)"
        )
    try:
        image.load()
    except Exception as exc:
        raise WireError(f"a camera frame is not a readable {expected}: {type(exc).__name__}: {exc}") from None
    return np.asarray(image)


def decode_state(data: bytes, values: int) -> np.ndarray:
    """The state: ``values`` float32 values, every one finite and within ``STATE_LIMIT``."""
    if len(data) % 4:
        raise WireError(f"a state of {len(data)} bytes is not float32 values (4 bytes each)")
    state = np.frombuffer(data, dtype=np.float32).copy()
    if state.size != values:
        raise WireError(f"the served model takes a state of {values} values; the request has {state.size}")
    bad = np.flatnonzero(~np.isfinite(state) | (np.abs(state) > STATE_LIMIT))
    if bad.size:
        raise WireError(f"state value {bad[0]} is {state[bad[0]]:g}: every value must be finite and within ±1e6")
    return state


def encode_reply(
    actions: torch.Tensor, timings: dict[str, float], batch_size: int, batch: dict[str, float], stamps: list[int]
) -> bytes:
    chunk = actions.to(torch.float32).contiguous().numpy()
    header = {"shape": list(chunk.shape), "batch_size": batch_size, "batch": batch, "stamps": stamps, **timings}
    return pack(header, [chunk.tobytes()])


@dataclass(frozen=True)
class Answer:
    actions: np.ndarray  # (chunk, action_dim) float32, robot units
    batch_size: int
    timings: dict[str, float]  # queue_ms, inference_ms, server_decode_ms, rows (computed), server_ms
    batch: dict[str, float]  # number, start_ms, end_ms (the server's clock), size, rows
    stamps: tuple[int, int]  # unix ns: the server received the request, sent the reply


def decode_reply(message: bytes) -> Answer:
    header, parts = unpack(message, 1)
    try:
        shape = tuple(_whole(size) for size in header.pop("shape"))
        batch_size = _whole(header.pop("batch_size"))
        batch = {name: float(value) for name, value in header.pop("batch").items()}
        received, sent = (_whole(stamp) for stamp in header.pop("stamps"))
        timings = {name: float(value) for name, value in header.items() if name != "parts"}
        actions = np.frombuffer(parts[0], dtype=np.float32).reshape(shape)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise WireError(f"an unreadable reply: {exc}") from None
    if not all(math.isfinite(value) for value in (*timings.values(), *batch.values())):
        raise WireError("a reply with non-finite timings")
    if not np.isfinite(actions).all():
        raise WireError("a reply with non-finite actions")
    return Answer(actions, batch_size, timings, batch, (received, sent))
