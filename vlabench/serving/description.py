"""``Describe``: what a robot needs from a policy server, and nothing about the server's host. The serving contract
(camera views, frame size, state length, encodings, the largest request, the batcher's settings) and the server's
baseline measurement (its phases, energy, device, backend) that an offload result is built on, with the host's
provenance (hostname, command line, CPU model, libraries, git revision) and local paths withheld: the robots'
result carries the robots' own provenance instead."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from vlabench.config import RunConfig
from vlabench.errors import UnavailableError
from vlabench.results.provenance import Provenance
from vlabench.results.schema import RunResult
from vlabench.serving.wire import ENCODINGS, Contract

PROTOCOL = 2
WITHHELD = "withheld by the server"
LOCAL_SETTINGS = ("out", "checkpoint", "energy_log", "tls_ca", "tls_cert", "tls_key", "token_file", "remote")
"""Server settings that name its own files or peers: reset to their defaults in what a client sees."""


@dataclass(frozen=True)
class Description:
    contract: Contract
    max_batch: int
    max_wait_ms: float
    batch_sizes: list[int]
    max_request_bytes: int
    baseline: RunResult


def describe(baseline: RunResult, contract: Contract, max_wait_ms: float, batch_sizes: list[int]) -> bytes:
    defaults = RunConfig()
    config = baseline.config.model_copy(update={name: getattr(defaults, name) for name in LOCAL_SETTINGS})
    model = baseline.model.model_copy(update={"checkpoint": WITHHELD if baseline.model.checkpoint else None})
    shown = baseline.model_copy(update={"config": config, "model": model}).model_dump(mode="json")
    shown.pop("provenance")
    return json.dumps(
        {
            "protocol": PROTOCOL,
            "views": contract.views,
            "frame_shape": list(contract.frame_shape),
            "state_values": contract.state_values,
            "encodings": list(ENCODINGS),
            "max_request_bytes": contract.max_request_bytes,
            "max_batch": baseline.workload.batch,
            "max_wait_ms": max_wait_ms,
            "batch_sizes": batch_sizes,
            "baseline": shown,
        }
    ).encode()


def read_description(answer: bytes, address: str, provenance: Provenance) -> Description:
    """The server's description, its baseline given this host's ``provenance``; UnavailableError when ``address``
    does not answer like a vlabench policy server of this protocol."""
    try:
        settings: dict[str, Any] = json.loads(answer)
        if settings.get("protocol") != PROTOCOL:
            raise ValueError(f"protocol {settings.get('protocol')!r}, this client speaks {PROTOCOL}")
        baseline = RunResult.model_validate({**settings["baseline"], "provenance": provenance.model_dump()})
        height, width = (int(size) for size in settings["frame_shape"])
        contract = Contract(int(settings["views"]), (height, width), int(settings["state_values"]))
        return Description(
            contract=contract,
            max_batch=int(settings["max_batch"]),
            max_wait_ms=float(settings["max_wait_ms"]),
            batch_sizes=[int(size) for size in settings["batch_sizes"]],
            max_request_bytes=int(settings["max_request_bytes"]),
            baseline=baseline,
        )
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
        raise UnavailableError(f"{address} is not a vlabench policy server this client can use ({exc})") from None
