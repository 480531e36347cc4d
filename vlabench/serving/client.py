"""``vlabench run --remote HOST:PORT``: robots on this host served by a ``vlabench serve`` policy server. Each robot
encodes its camera frames (``--encoding``), sends them with its instruction and state, and receives its chunk; the
time of every request is split into this host's encoding and decoding, the link each way (the four timestamps of
``results.serving_parts.Wire``), and the server's decoding, queueing, inference and reply. ``--link`` puts an
emulated link on the way. The client waits a bounded time (``--connect-timeout``) for a server that is starting; a
server that fails mid-run leaves a partial result with what was served, and the run ends with that fault's exit
code."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import grpc

from vlabench.analysis.cet import CostReport
from vlabench.commands.run import (
    RobotObservations,
    announce_window,
    check_robots_fit,
    interrupted,
    robots_settings,
    search,
)
from vlabench.config import RunConfig
from vlabench.errors import (
    InputError,
    InterruptError,
    ServerLostError,
    ServerShuttingDownError,
    ServerTimeoutError,
    UnavailableError,
    VlabenchError,
)
from vlabench.hardware.detection import detect_host
from vlabench.measure.batching import BatcherClosed, BatchRecord
from vlabench.measure.serving import Reply, ServingMeasurement, clock, drive_robots
from vlabench.measure.stats import Stats, summarize
from vlabench.results.assemble import execution_model
from vlabench.results.offload import offload_result, offload_served
from vlabench.results.provenance import collect_provenance
from vlabench.results.schema import RunResult
from vlabench.results.serving import Encoding, Link, ServingResult, serving_result
from vlabench.serving.description import Description, read_description
from vlabench.serving.faults import RemoteError, parse_address, rpc_fault, target, wait_accepting
from vlabench.serving.link import EmulatedLink, LinkSettings, parse_link
from vlabench.serving.security import TOKEN_HEADER, channel_credentials, read_token
from vlabench.serving.server import MAX_REPLY_BYTES, SERVICE, STARTING
from vlabench.serving.wire import WireError, decode_reply, encode_request

PINGS = 20
SERVER_GONE = (ServerLostError, ServerShuttingDownError)
"""Faults after which a capacity search cannot go on."""
DESCRIBE_TIMEOUT_S = 5.0


class Session:
    """One channel to the server (through the emulated link, when asked) and its calls."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        host, port = parse_address(config.remote or "")
        self.where = target(host, port)
        credentials = channel_credentials(config.tls_ca, config.tls_cert, config.tls_key)
        token = read_token(config.token_file)
        self.metadata = ((TOKEN_HEADER, f"Bearer {token}"),) if token else ()
        self.link: LinkSettings | None = parse_link(config.link) if config.link else None
        self.deadline = time.monotonic() + config.connect_timeout_s
        wait_accepting(host, port, self.deadline)
        self.proxy = EmulatedLink(host, port, self.link, config.seed) if self.link else None
        options = [
            ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
            ("grpc.max_send_message_length", 256 << 20),
        ]
        address = self.proxy.address if self.proxy else self.where
        self.tls = credentials is not None
        if credentials is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:
            options.append(("grpc.ssl_target_name_override", host))
            self.channel = grpc.secure_channel(address, credentials, options=options)
        self.act = self.channel.unary_unary(f"/{SERVICE}/Act")
        self.in_flight: set[grpc.Future] = set()
        self.lock = threading.Lock()

    def close(self) -> None:
        self.channel.close()
        if self.proxy:
            self.proxy.close()

    def describe(self) -> Description:
        """The server's description, waiting (until ``--connect-timeout``) while it says it is starting."""
        call = self.channel.unary_unary(f"/{SERVICE}/Describe")
        provenance = collect_provenance(detect_host(), 1)
        while True:
            left = self.deadline - time.monotonic()
            try:
                answer = call(b"", timeout=max(0.1, min(DESCRIBE_TIMEOUT_S, left)), metadata=self.metadata)
                return read_description(answer, self.where, provenance)
            except grpc.RpcError as exc:
                fault = rpc_fault(exc, DESCRIBE_TIMEOUT_S, self.where)
                starting = exc.code() == grpc.StatusCode.UNAVAILABLE and STARTING in (exc.details() or "")
                if isinstance(fault, ServerLostError):  # closed before a first answer: the handshake failed
                    hint = (
                        "a client certificate it requires (--tls-cert/--tls-key) or a CA that does not match"
                        if (self.tls)
                        else "does it need TLS (--tls-ca)?"
                    )
                    raise UnavailableError(
                        f"the policy server at {self.where} closed the connection before answering, as a TLS "
                        f"handshake refused: {hint} ({exc.details()})"
                    ) from None
                if not starting and not isinstance(fault, ServerTimeoutError):
                    raise fault from None
            if time.monotonic() + 0.25 >= self.deadline:
                raise ServerTimeoutError(
                    f"the policy server at {self.where} accepts connections but was still starting (timing its "
                    f"baseline pass) after {self.config.connect_timeout_s:g} s: raise --connect-timeout"
                )
            time.sleep(0.25)

    def ping(self) -> Stats:
        """Round trips of an empty call on this channel (and link): no payload, no work on the server."""
        call = self.channel.unary_unary(f"/{SERVICE}/Ping")
        times = []
        for _ in range(PINGS):
            began = clock()
            try:
                call(b"", timeout=DESCRIBE_TIMEOUT_S, metadata=self.metadata)
            except grpc.RpcError as exc:
                raise rpc_fault(exc, DESCRIBE_TIMEOUT_S, self.where) from None
            times.append((clock() - began) / 1e6)
        return summarize(times)

    def abandon(self) -> None:
        with self.lock:
            for future in list(self.in_flight):
                future.cancel()

    def ask_with(self, observations: RobotObservations) -> Callable[[int, int], Reply]:
        config, timeout_s = self.config, self.config.request_timeout_s

        def ask(robot: int, number: int) -> Reply:
            began = clock()
            message = encode_request(robot, number, observations(robot, number), config.encoding, config.jpeg_quality)
            sent, sent_unix = clock(), time.time_ns()
            future = self.act.future(message, timeout=timeout_s, metadata=self.metadata)
            with self.lock:
                self.in_flight.add(future)
            try:
                answer_bytes = future.result()
            except grpc.FutureCancelledError:
                raise BatcherClosed("the window closed") from None
            except grpc.RpcError as exc:
                raise RemoteError(rpc_fault(exc, timeout_s, self.where)) from None
            finally:
                with self.lock:
                    self.in_flight.discard(future)
            received, received_unix = clock(), time.time_ns()
            try:
                answer = decode_reply(answer_bytes)
            except WireError as exc:
                raise RemoteError(UnavailableError(f"an unreadable reply from {self.where}: {exc}")) from None
            decoded = clock()
            server, batch = answer.timings, answer.batch
            inside = server["server_decode_ms"] + server["queue_ms"] + server["inference_ms"]
            split = {
                "encode": (sent - began) / 1e6,
                "server_decode": server["server_decode_ms"],
                "server_reply": max(0.0, server["server_ms"] - inside),
                "decode": (decoded - received) / 1e6,
            }
            record = BatchRecord(
                int(batch["number"]),
                int(batch["start_ms"] * 1e6),
                int(batch["end_ms"] * 1e6),
                int(batch["size"]),
                int(batch["rows"]),
            )
            stamps = (sent_unix, answer.stamps[0], answer.stamps[1], received_unix)
            rows = int(server.get("rows", answer.batch_size))
            return Reply(
                server["queue_ms"], server["inference_ms"], answer.batch_size, rows, split, record, len(message),
                len(answer_bytes), stamps,
            )  # fmt: skip

        return ask


def with_batches(measured: ServingMeasurement) -> ServingMeasurement:
    """The batches that served these robots, once each (the server's clock), from their replies."""
    batches = {entry.reply.batch.number: entry.reply.batch for entry in measured.requests if entry.reply.batch}
    measured.batches = sorted(batches.values(), key=lambda record: record.start_ns)
    return measured


def fault_of(errors: list[BaseException], stopped: str | None, where: str = "the server") -> VlabenchError:
    """The error a window that ended early (or served nothing) ends the run with: the first robot's fault, the
    interrupt, or replies that never came within the window."""
    faults = [error.fault for error in errors if isinstance(error, RemoteError)]
    if faults:
        return faults[0]
    if errors:
        return UnavailableError(f"the robots failed: {type(errors[0]).__name__}: {errors[0]}")
    if stopped:
        return InterruptError(stopped)
    return ServerTimeoutError(f"no reply from {where} before the serving window and its grace ran out")


def link_of(link: LinkSettings | None) -> Link | None:
    if link is None:
        return None
    return Link(
        name=link.name, delay_ms=link.delay_ms, jitter_ms=link.jitter_ms, rate_mbps=link.rate_mbps, loss=link.loss
    )


def run_remote(
    config: RunConfig, announce: Callable[[str], None] | None = None
) -> tuple[RunResult, VlabenchError | None]:
    """Serve ``--robots`` robots of this host (or search the capacity) from the server at ``--remote`` for
    ``--serve-duration`` seconds each. Returns the result (the server's baseline with this serving block; partial
    when the window ended early) and the fault that ended it early, if any. What fails before anything was served (a
    bad address, a server that is not there or never ready, robots that do not fit here) raises."""
    session = Session(config)
    try:
        description = session.describe()
        baseline = description.baseline
        check_robots_fit(baseline.workload, config)
        workload = baseline.workload
        wanted = config.actions_per_chunk
        if wanted is not None and wanted > workload.chunk:
            raise InputError(
                f"--actions-per-chunk {wanted} is more than the chunk the server's model predicts ({workload.chunk})"
            )
        if wanted is not None:
            workload = workload.model_copy(update={"actions_per_chunk": wanted})
        execution = execution_model(config, workload)
        observations = RobotObservations(baseline.workload, config.seed)
        encoding = Encoding(format=config.encoding, quality=config.jpeg_quality if config.encoding == "jpeg" else None)
        ping = session.ping()
        errors: list[BaseException] = []

        def serve_at(robots: int) -> ServingResult:
            settings = replace(
                robots_settings(config, robots, description.max_batch, execution),
                max_wait_s=description.max_wait_ms / 1000.0,
            )
            ask = session.ask_with(observations.ensure(robots))  # made before the window opens
            announce_window(announce, settings, f"from {session.where}")
            measured = drive_robots(ask, settings, None, session.abandon)
            errors[:] = measured.errors
            try:
                return serving_result(
                    with_batches(measured),
                    transport="grpc",
                    actions_per_request=execution.actions_per_inference,
                    server=session.where,
                    batch_sizes=description.batch_sizes,
                    encoding=encoding,
                    link=link_of(session.link),
                    ping_ms=ping,
                )
            except ValueError:  # nothing was served: no result
                fault = fault_of(measured.errors, measured.stopped, session.where)
                raise type(fault)(f"{fault}; nothing was served, no result was written") from None

        def costed(served: ServingResult) -> tuple[ServingResult, CostReport | None]:
            return offload_served(baseline, served, config, execution)

        def gone(served: ServingResult) -> bool:
            return interrupted(served) or any(isinstance(fault_of([error], None), SERVER_GONE) for error in errors)

        if config.robots == "auto":
            record, served = search(config, serve_at, costed, execution, gone)
            if served is None:
                fault = fault_of(errors, None, session.where)
                raise type(fault)(f"capacity search: {record.steps[0].reason}; no result was written")
        else:
            served = serve_at(config.robots or 1)
        result = offload_result(baseline, served, config, execution, client=socket.gethostname())
        return result, fault_of(errors, served.stopped) if result.status == "partial" else None
    finally:
        session.close()
