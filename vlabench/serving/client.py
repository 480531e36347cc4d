"""``vlabench run --remote HOST:PORT``: robots on this host served by a ``vlabench serve`` policy server. Each robot
encodes its camera frames (JPEG), sends them with its instruction and state, and receives its chunk; the time of
every request is split into this host's encoding and decoding, the network (the round trip less the server's own
time), and the server's decoding, queueing and inference."""

from __future__ import annotations

import json
import socket
from typing import Any

import grpc

from vlabench.commands.run_serving import OBSERVATIONS_PER_ROBOT, request_period_s, robot_observations
from vlabench.config import RunConfig
from vlabench.errors import InputError, UnavailableError
from vlabench.measure.serving import Reply, RobotsSettings, clock, drive_robots
from vlabench.models.workload import Workload
from vlabench.results.assemble import execution_model
from vlabench.results.offload import offload_result
from vlabench.results.schema import RunResult
from vlabench.results.serving import serving_result
from vlabench.serving.server import CHANNEL_OPTIONS, SERVICE
from vlabench.serving.wire import WireError, decode_reply, encode_request

CONNECT_TIMEOUT_S = 5.0


class RemoteError(Exception):
    """A request the policy server did not answer (the reason names the gRPC status and what it means)."""


def rpc_reason(error: grpc.RpcError, timeout_s: float) -> str:
    """What a failed call means for a robot: the server is down, too slow, or refused the request."""
    code = error.code() if hasattr(error, "code") else None
    detail = error.details() if hasattr(error, "details") else str(error)
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"the server is unreachable or went away ({detail})"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no reply within {timeout_s:g} s (the server is too slow or stuck)"
    if code == grpc.StatusCode.CANCELLED:
        return f"the call was cancelled ({detail})"
    name = code.name if code is not None else "an error"
    return f"the server answered {name}: {detail}"


def parse_address(address: str) -> str:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65_536:
        raise InputError(f"--remote {address}: expected HOST:PORT of a `vlabench serve`, e.g. 127.0.0.1:50051")
    return address


def describe(channel: grpc.Channel, address: str) -> dict[str, Any]:
    call = channel.unary_unary(f"/{SERVICE}/Describe")
    try:
        answer = call(b"", timeout=CONNECT_TIMEOUT_S, wait_for_ready=True)
    except grpc.RpcError as exc:
        raise UnavailableError(
            f"cannot reach the policy server at {address} ({rpc_reason(exc, CONNECT_TIMEOUT_S)}): is `vlabench "
            "serve` running there and the port open from here?"
        ) from None
    try:
        settings = json.loads(answer)
        settings["result"] = RunResult.model_validate(settings["result"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UnavailableError(f"{address} is not a vlabench policy server (its description: {exc})") from None
    return settings


def executed_workload(baseline: RunResult, config: RunConfig) -> Workload:
    """The server's workload with the actions this robot executes per chunk (``--actions-per-chunk``, at most the
    chunk the server's model predicts)."""
    workload, wanted = baseline.workload, config.actions_per_chunk
    if wanted is None:
        return workload
    if wanted > workload.chunk:
        raise InputError(
            f"--actions-per-chunk {wanted} is more than the chunk the server's model predicts ({workload.chunk})"
        )
    return workload.model_copy(update={"actions_per_chunk": wanted})


def run_remote(config: RunConfig) -> RunResult:
    """Serve ``--robots`` robots of this host from the server at ``--remote`` for ``--serve-duration`` seconds; the
    result is the server's baseline with this serving block. A robot that loses the server ends the run with an
    error and no result (a partial measurement is not a result)."""
    address = parse_address(config.remote or "")
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        settings = describe(channel, address)
        baseline: RunResult = settings["result"]
        robots = config.robots or 1
        observations = robot_observations(baseline.workload, config.seed, robots)
        act = channel.unary_unary(f"/{SERVICE}/Act")
        timeout_s = config.request_timeout_s

        def ask(robot: int, number: int) -> Reply:
            began = clock()
            message = encode_request(robot, number, observations[robot][number % OBSERVATIONS_PER_ROBOT])
            sent = clock()
            try:
                answer_bytes = act(message, timeout=timeout_s)
            except grpc.RpcError as exc:
                raise RemoteError(rpc_reason(exc, timeout_s)) from None
            received = clock()
            try:
                answer = decode_reply(answer_bytes)
            except WireError as exc:
                raise RemoteError(f"an unreadable reply: {exc}") from None
            decoded = clock()
            server = answer.timings
            split = {
                "encode": (sent - began) / 1e6,
                "network": max(0.0, (received - sent) / 1e6 - server["server_ms"]),
                "server_decode": server["server_decode_ms"],
                "decode": (decoded - received) / 1e6,
            }
            rows = int(server.get("rows", answer.batch_size))
            return Reply(server["queue_ms"], server["inference_ms"], answer.batch_size, rows, split)

        execution = execution_model(config, executed_workload(baseline, config))
        period_s = request_period_s(config.control_hz, execution)
        robots_settings = RobotsSettings(
            robots=robots,
            max_batch=int(settings["max_batch"]),
            max_wait_s=float(settings["max_wait_ms"]) / 1000.0,
            period_s=period_s,
            duration_s=config.serve_duration_s,
            execution=config.execution,
        )
        measured = drive_robots(ask, robots_settings)
    if measured.failures:
        shown = "; ".join(measured.failures[:3]) + (
            f" (+{len(measured.failures) - 3} more)" if len(measured.failures) > 3 else ""
        )
        raise UnavailableError(f"the policy server at {address} failed the robots: {shown}; no result was written")
    served = serving_result(
        measured,
        transport="grpc",
        actions_per_request=execution.actions_per_inference,
        server=f"{address} ({settings['hostname']})",
        batch_sizes=[int(size) for size in settings.get("batch_sizes", [])],
    )
    return offload_result(baseline, served, config, execution, client=socket.gethostname())
