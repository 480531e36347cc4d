"""``vlabench serve``: one policy instance behind a gRPC endpoint. It binds its address and starts answering at
once (``starting`` until ready: a robot can tell a server still timing its baseline from one that is not there),
runs the plan like ``vlabench run`` (the timed pass and energy on this host: the baseline every remote result builds
on), then serves robots' requests through a dynamic batcher, the batches running in the main thread where the
policy was prepared.

Its resources are bounded: a fixed pool of handler threads, at most ``concurrent`` calls at once (more are refused
with RESOURCE_EXHAUSTED), requests no larger than the served model's raw frames allow, frames checked from their
headers before decoding. Every handler error reaches the caller as a gRPC status with the reason; none is UNKNOWN."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc
import torch

from vlabench.commands.run import BatchedInference, InProcess, batched_inference, plan_run, prepare_contender
from vlabench.config import RunConfig
from vlabench.errors import UnavailableError
from vlabench.measure.batching import BatcherClosed, BatcherFull, DynamicBatcher, serve
from vlabench.measure.serving import clock
from vlabench.models.input_pipeline import CAMERA_FRAME
from vlabench.results.schema import RunResult
from vlabench.serving.description import describe
from vlabench.serving.security import ServerSecurity
from vlabench.serving.wire import Contract, WireError, decode_request, encode_reply

SERVICE = "vlabench.PolicyServer"
MAX_REPLY_BYTES = 16 << 20
REPLY_TIMEOUT_S = 600.0
"""How long a request may wait for its batch's inference before the server gives up on it."""
STARTING = "starting: the server is timing its baseline pass and preparing the policy"
SHUTTING_DOWN = "the policy server is shutting down"
DRAIN_S = 0.5


@dataclass(frozen=True)
class Limits:
    """Handler threads (each holds one request while it waits for its batch) and calls accepted at once."""

    workers: int
    concurrent: int

    @classmethod
    def for_batch(cls, max_batch: int) -> Limits:
        workers = min(256, max(16, 4 * max_batch))
        return cls(workers, 2 * workers)


def channel_options(max_receive: int) -> list[tuple[str, int]]:
    return [("grpc.max_receive_message_length", max_receive), ("grpc.max_send_message_length", MAX_REPLY_BYTES)]


@dataclass(frozen=True)
class Listener:
    """A gRPC server bound to its address, not started yet."""

    server: grpc.Server
    host: str
    port: int


def listen(host: str, port: int, contract: Contract, limits: Limits, security: ServerSecurity) -> Listener:
    """Bind ``host:port`` (0: any free port) now, before any work: an address in use is refused at once."""
    options = [*channel_options(contract.max_request_bytes), ("grpc.so_reuseport", 0)]  # a port in use is an error
    pool = futures.ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="vlabench-serve")
    server = grpc.server(pool, options=options, maximum_concurrent_rpcs=limits.concurrent)
    address = f"{host}:{port}"
    try:
        if security.credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, security.credentials)
    except RuntimeError as exc:
        raise UnavailableError(f"cannot listen on {address}: {exc}") from None
    if bound == 0:
        raise UnavailableError(f"cannot listen on {address} (in use, or not an address of this host)")
    return Listener(server, host, bound)


class Refused(Exception):
    """A call answered with ``code`` and a reason."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status a handler error is answered with, and its reason."""
    if isinstance(exc, Refused):
        return exc.code, str(exc)
    if isinstance(exc, WireError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, BatcherClosed):
        return grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN
    if isinstance(exc, BatcherFull):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"the policy server is overloaded: {exc}"
    if isinstance(exc, TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED, str(exc)
    return grpc.StatusCode.INTERNAL, f"the policy server failed: {type(exc).__name__}: {exc}"


class PolicyServer:
    """The gRPC endpoint (``Describe``: the contract and baseline; ``Act``: one robot's observation in, its chunk
    out; ``Ping``: an empty round trip) and the batcher between its request threads and the inference loop."""

    def __init__(self, listener: Listener, contract: Contract, limits: Limits, security: ServerSecurity) -> None:
        self.contract, self.limits, self.security = contract, limits, security
        self.server, self.host, self.port = listener.server, listener.host, listener.port
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.baseline: RunResult | None = None
        self.infer: BatchedInference | None = None
        self.batcher: DynamicBatcher | None = None
        self.began_ns = 0
        self.description = b""
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(self.guarded(method))
            for name, method in (("Act", self.act), ("Describe", self.describe), ("Ping", self.ping))
        }
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        self.server.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def guarded(self, method: Callable[[bytes], bytes]) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        """The handler with the token checked first and every error answered as a clear status."""

        def handle(message: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                refusal = self.security.refusal(context)
                if refusal:
                    raise Refused(grpc.StatusCode.UNAUTHENTICATED, refusal)
                return method(message)
            except Exception as exc:
                code, reason = status_of(exc)
            context.abort(code, reason)

        return handle

    def serving(self) -> None:
        if self.stopping.is_set():
            raise Refused(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        if not self.ready.is_set():
            raise Refused(grpc.StatusCode.UNAVAILABLE, STARTING)

    def ping(self, message: bytes) -> bytes:
        return b""

    def describe(self, message: bytes) -> bytes:
        self.serving()
        return self.description

    def act(self, message: bytes) -> bytes:
        arrived_unix, arrived = time.time_ns(), clock()
        self.serving()
        request = decode_request(message, self.contract)
        decoded = clock()
        pending = self.batcher.submit(request.robot, request.observation)
        actions = pending.wait(REPLY_TIMEOUT_S)
        if not torch.isfinite(actions).all():
            raise Refused(grpc.StatusCode.INTERNAL, "the policy computed non-finite actions for this observation")
        batch = {
            "number": pending.batch,
            "start_ms": (pending.started_ns - self.began_ns) / 1e6,
            "end_ms": (pending.finished_ns - self.began_ns) / 1e6,
            "size": pending.batch_size,
            "rows": pending.rows,
        }
        timings = {
            "queue_ms": (pending.started_ns - pending.arrived_ns) / 1e6,
            "inference_ms": (pending.finished_ns - pending.started_ns) / 1e6,
            "server_decode_ms": (decoded - arrived) / 1e6,
            "rows": pending.rows,
            "server_ms": (clock() - arrived) / 1e6,
        }
        return encode_reply(actions, timings, pending.batch_size, batch, [arrived_unix, time.time_ns()])

    def start_serving(self, baseline: RunResult, infer: BatchedInference, max_wait_s: float) -> None:
        """Ready: requests from now on go to ``infer`` through a batcher of the baseline's batch."""
        self.baseline, self.infer = baseline, infer
        self.batcher = DynamicBatcher(baseline.workload.batch, max_wait_s, clock, max_queued=self.limits.workers)
        self.description = describe(baseline, self.contract, max_wait_s * 1000.0, infer.sizes)
        self.began_ns = clock()
        self.ready.set()

    def run(self, ready: Callable[[str], None] | None = None) -> None:
        """Serve until ``stop`` (or Ctrl-C): batches run in this thread."""
        if ready:
            ready(self.address)
        try:
            while not self.stopping.is_set():
                batch = self.batcher.next_batch(timeout_s=0.05)
                if batch:
                    serve(batch, self.infer, clock)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Fail what is queued and say "shutting down" to every call for ``DRAIN_S``, then stop: a robot learns why
        its server went, instead of finding the connection gone."""
        self.stopping.set()
        if self.batcher is not None:
            self.batcher.close()
        time.sleep(DRAIN_S)
        self.server.stop(grace=1.0).wait()

    def stop(self) -> None:
        self.stopping.set()


def start_server(
    config: RunConfig,
    host: str,
    port: int,
    security: ServerSecurity,
    announce: Callable[[str], None] | None = None,
    inform: Callable[[str], None] | None = None,
) -> PolicyServer:
    """Plan ``config`` (one backend) and bind the address first (bad input and an address in use are refused before
    any work; ``announce`` gets the address); answer ``starting`` while the plan is measured by the launcher
    ``vlabench run`` uses in its process (its baseline result; ``--precision auto`` probed first, the choice said
    to ``inform``) and prepared again at the measured precision to serve (exports and compiled graphs come from the
    caches) with a policy per batch size."""
    plan = plan_run(config)
    workload = plan.workload
    contract = Contract(workload.cameras * workload.frames, CAMERA_FRAME, workload.frames * workload.state_dim)
    limits = Limits.for_batch(workload.batch)
    policy = PolicyServer(listen(host, port, contract, limits, security), contract, limits, security)
    if announce:
        announce(policy.address)
    try:
        outcome = InProcess(announce=inform).launch([plan])
        outcome.raise_error()
        baseline = outcome.results()[0]
        served = plan if baseline.precision == plan.precision else plan.at(precision=baseline.precision)
        infer = batched_inference(served, prepare_contender(served), prepare_contender)
    except BaseException:
        policy.shutdown()
        raise
    policy.start_serving(baseline, infer, config.max_wait_ms / 1000.0)
    return policy
