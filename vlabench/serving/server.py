"""``vlabench serve``: one policy instance behind a gRPC endpoint. At start it runs the plan like ``vlabench run``
(the timed pass and energy on this host: the baseline every remote result builds on), then serves robots' requests
through a dynamic batcher, the batches running in the main thread where the policy was prepared."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc

from vlabench.commands.run import execute_many, plan_run, prepare_contender
from vlabench.commands.run_serving import BatchedInference, batched_inference
from vlabench.config import RunConfig
from vlabench.errors import UnavailableError
from vlabench.measure.batching import BatcherClosed, DynamicBatcher, serve
from vlabench.measure.serving import clock
from vlabench.models.input_pipeline import CAMERA_FRAME
from vlabench.results.schema import RunResult
from vlabench.serving.wire import WireError, decode_request, encode_reply

SERVICE = "vlabench.PolicyServer"
MAX_MESSAGE_BYTES = 64 << 20
MAX_CONCURRENT_REQUESTS = 64
"""Requests handled at once (each waits in the batcher); more wait in gRPC's own queue."""
REPLY_TIMEOUT_S = 600.0
"""How long a request may wait for its batch's inference before the server gives up on it."""
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


@dataclass(frozen=True)
class ServedModel:
    """What requests must carry for the served model: camera views, frame size, state length."""

    views: int
    frame_shape: tuple[int, int]
    state_values: int


@dataclass(frozen=True)
class Listener:
    """A gRPC server bound to its address, not started yet."""

    server: grpc.Server
    host: str
    port: int


def listen(host: str, port: int) -> Listener:
    """Bind ``host:port`` (0: any free port) now, before any work: an address in use is refused at once."""
    options = [*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)]  # a port in use is an error, never silently shared
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=MAX_CONCURRENT_REQUESTS), options=options)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise UnavailableError(f"cannot listen on {host}:{port}: {exc}") from None
    if bound == 0:
        raise UnavailableError(f"cannot listen on {host}:{port} (in use, or not an address of this host)")
    return Listener(server, host, bound)


class PolicyServer:
    """The gRPC endpoint (``Describe``: the baseline result and settings; ``Act``: one robot's observation in, its
    chunk out) and the batcher between its request threads and the inference loop."""

    def __init__(
        self,
        listener: Listener,
        baseline: RunResult,
        infer: BatchedInference,
        served: ServedModel,
        max_wait_s: float,
    ) -> None:
        self.baseline, self.infer, self.served = baseline, infer, served
        self.batcher = DynamicBatcher(baseline.workload.batch, max_wait_s, clock)
        self.stopping = threading.Event()
        self.server, self.host, self.port = listener.server, listener.host, listener.port
        handlers = {
            "Act": grpc.unary_unary_rpc_method_handler(self.act),
            "Describe": grpc.unary_unary_rpc_method_handler(self.describe),
        }
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self, message: bytes, context: grpc.ServicerContext) -> bytes:
        settings = {
            "result": self.baseline.model_dump(mode="json"),
            "max_batch": self.batcher.max_batch,
            "max_wait_ms": self.batcher.max_wait_ns / 1e6,
            "batch_sizes": self.infer.sizes,
            "hostname": socket.gethostname(),
        }
        return json.dumps(settings).encode()

    def act(self, message: bytes, context: grpc.ServicerContext) -> bytes:
        arrived = clock()
        served = self.served
        try:
            request = decode_request(message, served.views, served.frame_shape, served.state_values)
        except WireError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        decoded = clock()
        try:
            pending = self.batcher.submit(request.robot, request.observation)
            actions = pending.wait(REPLY_TIMEOUT_S)
        except BatcherClosed:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the policy server is shutting down")
        except TimeoutError as exc:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(exc))
        except Exception as exc:  # the batch's inference failed: every request of it is told why
            context.abort(grpc.StatusCode.INTERNAL, f"inference failed on the server: {type(exc).__name__}: {exc}")
        timings = {
            "queue_ms": (pending.started_ns - pending.arrived_ns) / 1e6,
            "inference_ms": (pending.finished_ns - pending.started_ns) / 1e6,
            "server_decode_ms": (decoded - arrived) / 1e6,
            "rows": pending.rows,
            "server_ms": (clock() - arrived) / 1e6,
        }
        return encode_reply(actions, timings, pending.batch_size)

    def run(self, ready: Callable[[str], None] | None = None) -> None:
        """Serve until ``stop`` (or Ctrl-C): batches run in this thread."""
        self.server.start()
        if ready:
            ready(self.address)
        try:
            while not self.stopping.is_set():
                batch = self.batcher.next_batch(timeout_s=0.05)
                if batch:
                    serve(batch, self.infer, clock)
        finally:
            self.batcher.close()
            self.server.stop(grace=1.0).wait()

    def stop(self) -> None:
        self.stopping.set()


def start_server(config: RunConfig, host: str, port: int) -> PolicyServer:
    """Plan ``config`` (one backend) and bind the address first (bad input and an address in use are refused before
    any work), measure the plan like ``vlabench run`` (its baseline result), prepare it again to serve (exports and
    compiled graphs come from the caches) with a policy per batch size."""
    plan = plan_run(config)
    listener = listen(host, port)
    baseline = execute_many([plan])[0]
    contender = prepare_contender(plan)
    workload = plan.workload
    served = ServedModel(workload.cameras * workload.frames, CAMERA_FRAME, workload.frames * workload.state_dim)
    infer = batched_inference(plan, contender, prepare_contender)
    return PolicyServer(listener, baseline, infer, served, config.max_wait_ms / 1000.0)
