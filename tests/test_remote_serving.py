"""``vlabench serve`` and ``vlabench run --remote`` on loopback: robots here, the policy in a server process. The
result splits where each request's time went; a server that is down, too slow or killed mid-request ends the run
with a clear error and no result file, never a hang."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from vlabench.results.relations import relation_problems
from vlabench.results.schema import RunResult
from vlabench.serving.server import SERVICE

SERVER_FLAGS = ["--min-iterations", "3", "--min-duration", "0", "--warmup", "1", "--threads", "1"]
READY = re.compile(r"on (127\.0\.0\.1:\d+) \(Ctrl-C stops\)")


class Server:
    """A ``vlabench serve`` process on a free loopback port."""

    def __init__(self, *flags: str) -> None:
        command = [sys.executable, "-m", "vlabench", "serve", "--port", "0", *SERVER_FLAGS, *flags]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.address = self._wait_ready()

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            found = READY.search(line)
            if found:
                threading.Thread(target=self._drain, daemon=True).start()
                return found.group(1)
        self.process.kill()
        raise AssertionError("the server never said it was serving: " + "".join(self.lines)[-3000:])

    def _drain(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    def stop(self, how: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(how)
        return self.process.wait(30)


@pytest.fixture(scope="module")
def server():
    running = Server("-m", "smolvla-tiny", "--batch", "4", "--max-wait-ms", "5", "--energy-meter", "estimated")
    yield running
    assert running.stop() == 0, "".join(running.lines)[-2000:]


def remote(address: str, out: Path, *flags: str, timeout: float = 180) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "vlabench", "run", "--remote", address, "-o", str(out), *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def test_four_robots_over_grpc_report_where_their_time_went(server, tmp_path):
    done = remote(server.address, tmp_path, "--robots", "4", "--serve-duration", "2", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = RunResult.model_validate(json.loads(done.stdout))
    served = result.serving
    assert served.transport == "grpc" and served.server.startswith(server.address)
    assert served.robots == 4 and [robot.robot for robot in served.per_robot] == [0, 1, 2, 3]
    assert set(served.split_ms) == {"encode", "network", "server_decode", "decode"}
    assert served.split_ms["encode"].p50 > 0 and served.inference.p50 > 0 and served.max_batch == 4
    parts = served.split_ms["encode"].p50 + served.split_ms["server_decode"].p50 + served.inference.p50
    assert served.latency.p50 >= 0.8 * parts  # the parts are within the round trip
    assert result.cost.robots_per_device == 4 and served.joules_per_action > 0
    assert "offload: 4 robot(s)" in result.warnings[-1]
    assert relation_problems(result) == []
    (saved,) = tmp_path.glob("*.json")
    assert RunResult.model_validate_json(saved.read_text()).run_id == result.run_id


def test_async_execution_over_the_network_is_measured_per_chunk(server, tmp_path):
    done = remote(
        server.address,
        tmp_path,
        "--robots",
        "2",
        "--serve-duration",
        "2",
        "--execution",
        "async",
        "--actions-per-chunk",
        "5",
        "--json",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    served = RunResult.model_validate(json.loads(done.stdout)).serving
    assert served.execution == "async" and served.request_period_ms == pytest.approx(500.0)
    assert served.requests >= 4 and served.stall.count == served.requests


def test_a_request_the_server_cannot_read_is_refused_and_the_server_goes_on(server):
    with grpc.insecure_channel(server.address) as channel:
        act = channel.unary_unary(f"/{SERVICE}/Act")
        with pytest.raises(grpc.RpcError) as raised:
            act(b"not a request", timeout=10)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "header" in raised.value.details()
        describe = channel.unary_unary(f"/{SERVICE}/Describe")
        assert json.loads(describe(b"", timeout=10))["max_batch"] == 4


def test_a_server_too_slow_for_the_deadline_ends_the_run_without_a_result(server, tmp_path):
    done = remote(server.address, tmp_path, "--robots", "1", "--serve-duration", "1", "--request-timeout", "0.001")
    assert done.returncode == 3 and "no reply within 0.001 s" in done.stderr
    assert "no result was written" in done.stderr and not list(tmp_path.glob("*.json"))


def test_no_server_at_the_address_is_a_clear_error_not_a_hang(tmp_path):
    began = time.monotonic()
    done = remote("127.0.0.1:9", tmp_path, "--robots", "1", "--serve-duration", "1", timeout=60)
    assert done.returncode == 3 and "cannot reach the policy server at 127.0.0.1:9" in done.stderr
    assert time.monotonic() - began < 30 and not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1:0", "127.0.0.1:99999"])
def test_an_address_that_is_not_host_port_is_refused(address, tmp_path):
    done = remote(address, tmp_path, "--robots", "1", timeout=60)
    assert done.returncode == 2 and "expected HOST:PORT" in done.stderr


def test_a_server_killed_mid_run_ends_the_run_with_the_reason_and_no_result(tmp_path):
    doomed = Server("-m", "act-tiny", "--batch", "2", "--energy-meter", "none")
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vlabench",
            "run",
            "--remote",
            doomed.address,
            "--robots",
            "2",
            "--serve-duration",
            "30",
            "-o",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)  # the robots are being served
    doomed.stop(signal.SIGKILL)
    _, stderr = client.communicate(timeout=120)
    assert client.returncode == 3, stderr[-2000:]
    assert "failed the robots" in stderr and "went away" in stderr and "no result was written" in stderr
    assert not list(tmp_path.glob("*.json"))


def test_serve_refuses_an_unknown_model_and_an_address_in_use_before_any_work(server):
    serve = [sys.executable, "-m", "vlabench", "serve", *SERVER_FLAGS]
    done = subprocess.run([*serve, "-m", "smolvla-tinyy", "--port", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Did you mean 'smolvla-tiny'?" in done.stderr
    port = server.address.rpartition(":")[2]
    done = subprocess.run([*serve, "-m", "smolvla-tiny", "--port", port], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
