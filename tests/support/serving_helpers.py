"""Policy servers for the serving tests: a ``vlabench serve`` process on a free loopback port, read until it
serves, and test certificates made with the ``openssl`` command."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

SERVER_FLAGS = ["--min-iterations", "3", "--min-duration", "0", "--warmup", "1", "--threads", "1"]
LISTENING = re.compile(r"listening on (\S+:\d+);")
READY = re.compile(r"on (\S+:\d+) \(Ctrl-C stops\)")


class Server:
    """A ``vlabench serve`` process; ``address`` once it listens, ``wait_ready`` until it serves."""

    def __init__(self, *flags: str, ready: bool = True) -> None:
        command = [sys.executable, "-m", "vlabench", "serve", "--port", "0", *SERVER_FLAGS, *flags]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.address = self._read_until(LISTENING)
        if ready:
            self.wait_ready()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read_until(self, pattern: re.Pattern) -> str:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            found = pattern.search(line)
            if found:
                return found.group(1)
        self.process.kill()
        raise AssertionError(f"the server never printed {pattern.pattern}: " + "".join(self.lines)[-3000:])

    def wait_ready(self) -> None:
        self._read_until(READY)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    def stop(self, how: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(how)
        return self.process.wait(30)

    @property
    def output(self) -> str:
        return "".join(self.lines)


def remote(address: str, out: Path, *flags: str, timeout: float = 180) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "vlabench", "run", "--remote", address, "-o", str(out), *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def certificates(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, all signed by the CA."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command makes the test certificates; it is not installed here")

    def run(*arguments: str) -> None:
        subprocess.run([openssl, *arguments], cwd=folder, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=vlabench test CA")  # fmt: skip
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN=vlabench test {name}")  # fmt: skip
        extra = ["-extfile", "server.ext"] if name == "server" else []
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", *extra)  # fmt: skip
    return {name: folder / name for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}
