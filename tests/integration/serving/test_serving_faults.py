"""Serving faults on loopback, none of which loses what was measured or blurs its cause: each connection failure
kind has its own message and exit code; a client waits a bounded time for a starting server; a server killed with
SIGKILL or shut down mid-run, or a run interrupted, leaves a partial result with the completed requests (flagged by
``validate``, left out by ``rank`` unless asked); a server that freezes for 3 s is flagged, and one slower than the
request timeout ends the run as a timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.serving_helpers import Server
from vlabench.cli.app import app
from vlabench.results.schema import RunResult, load_result
from vlabench.results.serving_relations import serving_relations

runner = CliRunner()


def wait_serving(process: subprocess.Popen, then_s: float = 2.0) -> None:
    """Until the run says its robots are being served, then ``then_s`` more (some requests complete)."""
    for line in process.stdout:
        if line.startswith("serving ") and "robot(s)" in line:
            time.sleep(then_s)
            return
    raise AssertionError("the run never served its robots: " + process.stderr.read()[-2000:])


def partial_result(out: Path) -> RunResult:
    (saved,) = out.glob("*.json")
    result = load_result(saved)
    assert result.status == "partial" and result.serving.status == "partial" and result.serving.requests > 0
    assert serving_relations(result) == []
    return result


@pytest.mark.parametrize(
    "address, code, message",
    [
        ("127.0.0.1:9", 10, "connection refused (nothing listens on port 9 there)"),
        ("[2001:db8::1]:50051", 11, "[2001:db8::1]:50051: the host"),
        ("no-such-host.invalid:50051", 12, "the name no-such-host.invalid does not resolve"),
    ],
)
def test_each_connection_failure_has_its_own_message_and_exit_code(address, code, message, tmp_path):
    flags = ["--robots", "1", "--connect-timeout", "1", "-o", str(tmp_path)]
    done = runner.invoke(app, ["run", "--remote", address, *flags])
    assert done.exit_code == code and message in done.output, done.output
    assert not list(tmp_path.glob("*.json"))


def test_a_client_waits_for_a_starting_server_and_a_server_killed_mid_run_leaves_a_partial_result(tmp_path):
    starting = Server("-m", "act-tiny", "--batch", "2", "--energy-meter", "none", "--min-duration", "3", ready=False)
    try:
        impatient = runner.invoke(app, ["run", "--remote", starting.address, "--connect-timeout", "0.5",
                                        "--robots", "1", "-o", str(tmp_path / "impatient")])  # fmt: skip
        assert impatient.exit_code == 13 and "still starting" in impatient.output, impatient.output
        # started while the server still times its baseline: it waits, then is served until the server is killed
        killer = threading.Thread(target=lambda: (starting.wait_ready(), time.sleep(3), starting.stop(signal.SIGKILL)))
        killer.start()
        done = runner.invoke(app, ["run", "--remote", starting.address, "--connect-timeout", "120", "--robots", "2",
                                   "--serve-duration", "60", "-o", str(tmp_path)])  # fmt: skip
        killer.join()
    finally:
        starting.stop(signal.SIGKILL)
    assert done.exit_code == 15 and "dropped" in done.output and "a partial result with the" in done.output
    result = partial_result(tmp_path)
    assert "robots failed" in result.partial_reason and result.serving.failures
    checked = runner.invoke(app, ["validate", str(tmp_path)])
    assert checked.exit_code == 6 and "partial" in checked.output
    ranked = runner.invoke(app, ["rank", str(tmp_path)])
    assert ranked.exit_code == 2 and "--include-partial keeps it" in ranked.output  # nothing else to rank
    assert runner.invoke(app, ["rank", str(tmp_path), "--include-partial"]).exit_code == 0


def frozen(server: Server, after_s: float, for_s: float) -> threading.Timer:
    def freeze() -> None:
        os.kill(server.pid, signal.SIGSTOP)
        time.sleep(for_s)
        os.kill(server.pid, signal.SIGCONT)

    timer = threading.Timer(after_s, freeze)
    timer.start()
    return timer


def test_a_server_that_freezes_is_flagged_one_slower_than_the_timeout_ends_the_run_and_one_shutting_down_says_so(
    tmp_path,
):
    """One server, three faults in turn: frozen 3 s under the default timeout (flagged, exit 0), frozen past a 1 s
    timeout (exit 13, partial), then SIGTERM mid-run (exit 14, partial)."""
    server = Server("-m", "smolvla-tiny", "--batch", "2", "--energy-meter", "estimated")
    try:
        timer = frozen(server, 1.5, 3.0)
        done = runner.invoke(app, ["run", "--remote", server.address, "--robots", "2", "--serve-duration", "6",
                                   "-o", str(tmp_path / "frozen"), "--json"])  # fmt: skip
        timer.join()
        assert done.exit_code == 0, done.output[-2000:]
        result = RunResult.model_validate(json.loads(done.stdout))
        assert result.serving.freezes and max(freeze.latency_ms for freeze in result.serving.freezes) >= 2500
        assert any(warning.startswith("FROZEN:") for warning in result.warnings) and result.status == "complete"
        assert serving_relations(result) == []

        timer = frozen(server, 1.5, 2.5)
        done = runner.invoke(app, ["run", "--remote", server.address, "--robots", "1", "--serve-duration", "6",
                                   "--request-timeout", "1", "-o", str(tmp_path / "timeout")])  # fmt: skip
        timer.join()
        assert done.exit_code == 13 and "no reply from" in done.output and "partial result" in done.output
        partial_result(tmp_path / "timeout")

        threading.Timer(3.0, server.stop, (signal.SIGTERM,)).start()  # the in-process robots are served within 3 s
        done = runner.invoke(app, ["run", "--remote", server.address, "--robots", "2", "--serve-duration", "60",
                                   "-o", str(tmp_path / "shutdown")])  # fmt: skip
        assert done.exit_code == 14 and "is shutting down" in done.output and "partial result" in done.output
        partial_result(tmp_path / "shutdown")
    finally:
        server.stop(signal.SIGKILL)


def test_a_served_run_interrupted_after_timing_keeps_a_partial_result(fast_run, tmp_path):
    command = [sys.executable, "-m", "vlabench", "run", "-m", "act-tiny", *fast_run.args(threads=None), "--robots", "2",
               "--serve-duration", "60", "-o", str(tmp_path)]  # fmt: skip
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_serving(run)
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 130 and "interrupted (Ctrl-C)" in stderr and "partial result" in stderr, stderr
    result = partial_result(tmp_path)
    assert result.timing.iterations >= 2 and result.partial_reason.startswith("interrupted (Ctrl-C) after")
