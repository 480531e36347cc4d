"""``vlabench serve`` and ``vlabench run --remote`` on loopback: robots here, the policy in a server process. The
result splits where each request's time went (the means add up), weighs what crossed the wire, times the link apart
from the server, and costs the window from the batches that ran; the server hands a client only what it needs, and
survives hostile input (bombs, oversize messages, NaN state, 200 clients at once, a killed client) with a clear status
for every call and bounded memory."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import psutil
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.support.serving_helpers import Server
from vlabench.cli.app import app
from vlabench.commands.run import RobotObservations
from vlabench.measure.batching import BatcherClosed, BatcherFull
from vlabench.models.input_pipeline import CAMERA_FRAME
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.results.schema import RunResult
from vlabench.results.serving_relations import serving_relations
from vlabench.serving.faults import parse_address, target
from vlabench.serving.server import SERVICE, Limits, status_of
from vlabench.serving.wire import WireError, decode_reply, encode_request, pack

runner = CliRunner()


@pytest.fixture(scope="module")
def server():
    running = Server("-m", "smolvla-tiny", "--batch", "4", "--max-wait-ms", "5", "--energy-meter", "estimated")
    yield running
    assert running.stop() == 0, running.output[-2000:]


def run_remote(address: str, out, *flags: str) -> RunResult:
    done = runner.invoke(app, ["run", "--remote", address, "-o", str(out), *flags, "--json"])
    assert done.exit_code == 0, done.output[-3000:]
    return RunResult.model_validate(json.loads(done.stdout))


def test_four_robots_over_grpc_report_where_their_time_went_and_what_the_window_cost(server, tmp_path):
    result = run_remote(server.address, tmp_path, "--robots", "4", "--serve-duration", "2")
    served = result.serving
    assert served.transport == "grpc" and served.server == server.address and served.status == "complete"
    assert served.robots == 4 and [robot.robot for robot in served.per_robot] == [0, 1, 2, 3]
    assert set(served.split_ms) == {"encode", "uplink", "server_decode", "server_reply", "downlink", "decode"}
    assert served.encoding.format == "jpeg" and served.encoding.quality == 90
    assert served.payload_bytes["request"].min > 10_000 and served.payload_bytes["reply"].min > 50 * 7 * 4
    assert served.wire.offset_uncertainty_ms >= 0 and served.wire.ping_ms.count == 20
    # the means add up to the latency (the p50s would not): every part is timed, nothing counted twice
    parts = sum(stats.mean for stats in served.split_ms.values()) + served.queue.mean + served.inference.mean
    assert parts == pytest.approx(served.latency.mean, rel=0.05, abs=0.5)
    # the window's energy and cost, recomputed from its batches as they ran
    log, energy = served.batch_log, served.energy
    assert len(log.size) == served.batches and sum(log.size) >= served.requests and 0 < served.busy_fraction <= 1
    idle_s = served.duration_s - sum(log.duration_ms) / 1000
    joules = sum(log.joules) + energy.idle_w * idle_s
    actions = served.requests * served.actions_per_request
    assert joules / actions == pytest.approx(served.joules_per_action) == pytest.approx(result.cost.joules_per_action)
    kwh_per_robot_hour = joules / served.duration_s * 3600 / served.robots / 3.6e6
    dollars = kwh_per_robot_hour * result.cost.assumptions.electricity_usd_per_kwh
    assert result.cost.basis == "electricity-only" and result.cost.usd_per_robot_hour == pytest.approx(dollars)
    assert result.cost.busy_fraction == pytest.approx(served.busy_fraction) and result.cost.robots_per_device == 4
    # the provenance is this host's, the phases the server's
    assert result.provenance.command_line == sys.argv and "offload: 4 robot(s)" in result.warnings[-1]
    assert serving_relations(result) == []
    (saved,) = tmp_path.glob("*.json")
    assert RunResult.model_validate_json(saved.read_text()).run_id == result.run_id


def test_describe_hands_a_client_the_contract_and_the_baseline_but_nothing_of_the_servers_host(server):
    with grpc.insecure_channel(server.address) as channel:
        answer = json.loads(channel.unary_unary(f"/{SERVICE}/Describe")(b"", timeout=10))
    assert answer["views"] == 2 and answer["frame_shape"] == list(CAMERA_FRAME) and answer["max_batch"] == 4
    text = json.dumps(answer)
    assert "provenance" not in answer["baseline"] and "hostname" not in text and "command_line" not in text
    assert answer["baseline"]["config"]["out"] == "results" and "git_revision" not in text


def test_async_execution_over_the_network_is_measured_per_chunk(server, tmp_path):
    flags = ["--robots", "2", "--serve-duration", "2", "--execution", "async", "--actions-per-chunk", "5"]
    served = run_remote(server.address, tmp_path, *flags).serving
    assert served.execution == "async" and served.request_period_ms == pytest.approx(500.0)
    assert served.requests >= 4 and served.stall.count == served.requests


def test_an_emulated_link_delays_each_way_and_raw_frames_weigh_what_they_are(server, tmp_path):
    flags = ["--robots", "1", "--serve-duration", "1.5", "--link", "delay=20,jitter=0", "--encoding", "raw"]
    result = run_remote(server.address, tmp_path, *flags)
    served = result.serving
    assert served.link.name == "custom" and served.link.delay_ms == 20 and served.encoding.format == "raw"
    assert served.split_ms["uplink"].min >= 19 and served.split_ms["downlink"].min >= 19
    assert served.wire.ping_ms.min >= 40  # an empty call crosses the link twice
    assert served.payload_bytes["request"].min > 2 * CAMERA_FRAME[0] * CAMERA_FRAME[1] * 3
    assert serving_relations(result) == []


def test_the_capacity_search_runs_against_a_remote_server(server, tmp_path):
    flags = ["--robots", "auto", "--max-robots", "3", "--serve-duration", "1", "--control-hz", "1"]
    result = run_remote(server.address, tmp_path, *flags)
    search = result.serving.capacity
    assert [step.robots for step in search.steps] == [1, 2, 3] and all(step.passed for step in search.steps)
    assert result.serving.capacity_robots == search.capacity_robots == 3 == result.serving.robots
    assert result.config.robots == "auto" and all(step.joules_per_action > 0 for step in search.steps)
    assert serving_relations(result) == []


@pytest.mark.parametrize(
    "address, why",
    [
        ("--help:1", "'--help' is not a host name"),
        ("localhost", "expected HOST:PORT"),
        ("127.0.0.1:0", "expected HOST:PORT"),
        ("127.0.0.1:99999", "expected HOST:PORT"),
        ("[::1:50051", "is not a host name"),
        ("[zz::1]:50051", "not an IPv6 address"),
        ("bad host!:50051", "is not a host name"),
    ],
)
def test_an_address_that_is_not_host_port_is_refused_before_anything(address, why, tmp_path):
    done = runner.invoke(app, ["run", f"--remote={address}", "--robots", "1", "-o", str(tmp_path)])
    assert done.exit_code == 2 and why in done.output, done.output


def test_serve_refuses_an_unknown_model_and_an_address_in_use_before_any_work(server):
    done = runner.invoke(app, ["serve", "-m", "smolvla-tinyy", "--port", "0"])
    assert done.exit_code == 2 and "Did you mean 'smolvla-tiny'?" in done.output
    port = server.address.rpartition(":")[2]
    done = runner.invoke(app, ["serve", "-m", "smolvla-tiny", "--port", port])
    assert done.exit_code == 3 and f"cannot listen on 127.0.0.1:{port}" in done.output


def frame(size: tuple[int, int], fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size).save(out, format=fmt)
    return out.getvalue()


def hostile_requests() -> dict[str, tuple[bytes, str]]:
    """Requests no robot should send, each with the status and reason the server must answer."""
    workload = Workload.from_spec(load_model_spec("smolvla-tiny"))
    good = encode_request(0, 0, RobotObservations(workload, 0).ensure(1)(0, 0))
    state = np.zeros(workload.state_dim, dtype=np.float32)
    header = {"robot": 9, "number": 0, "instruction": "pick", "views": 2, "encoding": "jpeg"}
    jpeg = frame((640, 480), "JPEG")

    def with_state(values: bytes) -> bytes:
        return pack(header, [jpeg, jpeg, values])

    nan, inf = state.copy(), state.copy()
    nan[3], inf[0] = np.nan, np.inf
    return {
        "garbage": (b"not a request", "INVALID_ARGUMENT: a header"),
        "jpeg bomb": (pack(header, [frame((12000, 12000), "JPEG"), jpeg, state.tobytes()]), "INVALID_ARGUMENT"),
        "png bomb": (pack(header, [frame((16000, 16000), "PNG"), jpeg, state.tobytes()]), "INVALID_ARGUMENT"),
        "oversize": (good + b"\x00" * (8 << 20), "RESOURCE_EXHAUSTED"),
        "nan state": (with_state(nan.tobytes()), "INVALID_ARGUMENT: state value 3 is nan"),
        "inf state": (with_state(inf.tobytes()), "INVALID_ARGUMENT: state value 0 is inf"),
        "odd state": (with_state(state.tobytes()[:-1]), "INVALID_ARGUMENT: a state of 127 bytes"),
        "missing frame": (
            pack(header, [jpeg, state.tobytes()]),
            "INVALID_ARGUMENT: carries 1 frame(s) (its header says 2)",
        ),
        "good": (good, "OK"),
    }


def call(address: str, message: bytes, timeout: float = 60) -> str:
    """``CODE: reason`` of one Act call on its own channel (``OK`` with a readable chunk)."""
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        try:
            decode_reply(channel.unary_unary(f"/{SERVICE}/Act")(message, timeout=timeout))
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    return "OK"


def test_hostile_clients_get_a_clear_status_each_and_the_server_keeps_serving_in_bounded_memory(server):
    """Issue 48's loopback check: decompression bombs, an oversize message, NaN/inf/odd-length state, 200 clients at
    once and a killed client. Every call is answered OK or with a status that says why (never UNKNOWN), the server
    still serves afterwards, and its RSS stays under its bound: the calls it accepts at once times the largest
    request (gRPC's buffers and the decoded frames), plus 256 MiB."""
    process = psutil.Process(server.pid)
    before = process.memory_info().rss
    with grpc.insecure_channel(server.address) as channel:
        largest = json.loads(channel.unary_unary(f"/{SERVICE}/Describe")(b"", timeout=10))["max_request_bytes"]
    limits = Limits.for_batch(4)
    bound = before + limits.concurrent * largest * 2 + (256 << 20)
    peak = [before]
    requests = hostile_requests()
    for name, (message, expected) in requests.items():
        answer = call(server.address, message)
        peak.append(process.memory_info().rss)
        assert answer.startswith(expected.split(":")[0]) and expected.split(": ", 1)[-1] in answer, (name, answer)

    # a client killed mid-call: the server goes on
    good = requests["good"][0]
    killed = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, server.address], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    killed.stdin.write(good)
    killed.stdin.close()
    assert killed.stdout.readline().strip() == b"sending"
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)

    # 200 clients at once, half of them hostile: each answer is OK or a clear refusal
    mixed = [requests["good" if index % 2 else "nan state"][0] for index in range(200)]
    with ThreadPoolExecutor(200) as pool:
        calls = [pool.submit(call, server.address, message, 120) for message in mixed]
        while not all(future.done() for future in calls):
            peak.append(process.memory_info().rss)
            time.sleep(0.05)
    answers = [future.result() for future in calls]
    codes = {answer.split(":")[0] for answer in answers}
    assert codes <= {"OK", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}, codes
    hostile = [answer for answer in answers[0::2] if not answer.startswith("RESOURCE_EXHAUSTED")]
    assert all(answer.startswith("INVALID_ARGUMENT") for answer in hostile)
    assert "OK" in codes and max(peak) < bound, (max(peak) - before) / 2**20
    assert call(server.address, good) == "OK" and server.process.poll() is None


KILLED_CLIENT = """
import sys, grpc
message = sys.stdin.buffer.read()
channel = grpc.insecure_channel(sys.argv[1])
future = channel.unary_unary("/vlabench.PolicyServer/Act").future(message, timeout=60)
print("sending", flush=True)
future.result()
"""


@pytest.mark.parametrize(
    "error, code, reason",
    [
        (WireError("a state of 13 bytes"), "INVALID_ARGUMENT", "a state of 13 bytes"),
        (BatcherClosed(), "UNAVAILABLE", "shutting down"),
        (BatcherFull("64 requests already wait"), "RESOURCE_EXHAUSTED", "overloaded: 64 requests"),
        (TimeoutError("not served within 600 s"), "DEADLINE_EXCEEDED", "not served within"),
        (RuntimeError("CUDA error: out of memory"), "INTERNAL", "RuntimeError: CUDA error: out of memory"),
    ],
)
def test_every_handler_error_is_answered_with_a_status_that_says_why(error, code, reason):
    status, detail = status_of(error)
    assert status.name == code and reason in detail


def test_an_ipv6_address_in_brackets_is_a_host_and_port():
    assert parse_address("[::1]:50051") == ("::1", 50051) and target("::1", 50051) == "[::1]:50051"
    assert parse_address("gpu-box.lab:7") == ("gpu-box.lab", 7)
