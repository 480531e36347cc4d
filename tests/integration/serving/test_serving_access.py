"""Who may use a policy server: TLS with the server's certificate and, optionally, a client certificate every caller
must present, and an access token; a server bound beyond loopback without them warns. Certificates are made with the
``openssl`` command for the test (skipped, saying so, where it is not installed)."""

from __future__ import annotations

import json
import signal

import pytest
from typer.testing import CliRunner

from tests.support.serving_helpers import Server, certificates
from vlabench.cli.app import app
from vlabench.results.schema import RunResult
from vlabench.serving.security import ServerSecurity, exposure_warning

runner = CliRunner()
TOKEN = "vlabench-test-token-0123456789"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    files = certificates(folder)
    (folder / "token").write_text(TOKEN + "\n")
    (folder / "wrong").write_text("not-the-token-0123456789\n")
    flags = ["--tls-cert", str(files["server.pem"]), "--tls-key", str(files["server.key"]),
             "--tls-ca", str(files["ca.pem"]), "--token-file", str(folder / "token")]  # fmt: skip
    server = Server("-m", "act-tiny", "--energy-meter", "none", *flags)
    yield server, files, folder
    server.stop(signal.SIGKILL)


def client_flags(files, folder, token: str = "token", cert: bool = True) -> list[str]:
    flags = ["--tls-ca", str(files["ca.pem"]), "--token-file", str(folder / token)]
    if cert:
        flags += ["--tls-cert", str(files["client.pem"]), "--tls-key", str(files["client.key"])]
    return flags


def test_a_client_with_the_ca_its_certificate_and_the_token_is_served_over_tls(secured, tmp_path):
    server, files, folder = secured
    done = runner.invoke(app, ["run", "--remote", server.address, "--robots", "1", "--serve-duration", "0.5",
                               *client_flags(files, folder), "-o", str(tmp_path), "--json"])  # fmt: skip
    assert done.exit_code == 0, done.output[-2000:]
    result = RunResult.model_validate(json.loads(done.stdout))
    assert result.serving.requests > 0 and result.config.token_file == folder / "token"
    assert TOKEN not in done.stdout  # the file is recorded, never the token


@pytest.mark.parametrize(
    "token, cert, code, message",
    [
        ("wrong", True, 2, "the access token is not this server's"),
        ("token", False, 3, "as a TLS handshake refused: a client certificate it requires"),
    ],
)
def test_a_caller_without_the_token_or_a_client_certificate_is_refused(secured, token, cert, code, message, tmp_path):
    server, files, folder = secured
    flags = client_flags(files, folder, token, cert)
    done = runner.invoke(app, ["run", "--remote", server.address, "--robots", "1", *flags, "-o", str(tmp_path)])
    assert done.exit_code == code and message in done.output, done.output
    assert not list(tmp_path.glob("*.json"))


def test_a_server_reachable_beyond_loopback_without_tls_or_a_token_warns():
    open_door = ServerSecurity(None, None, False)
    assert exposure_warning("127.0.0.1", open_door) is None and exposure_warning("::1", open_door) is None
    warning = exposure_warning("0.0.0.0", open_door)
    assert "without TLS or a token" in warning and "--tls-cert" in warning
    assert "without a token" in exposure_warning("10.0.0.2", ServerSecurity(object(), None, False))
    assert exposure_warning("10.0.0.2", ServerSecurity(object(), "t" * 20, False)) is None
    # the command says so before any work (here it then refuses an unknown model)
    done = runner.invoke(app, ["serve", "--host", "0.0.0.0", "-m", "smolvla-tinyy"])
    assert "beyond loopback without TLS or a token" in done.output and done.exit_code == 2


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tls-cert", "cert.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-ca", "ca.pem"], "--tls-ca requires client certificates"),
        (["--token-file", "missing"], "--token-file missing: not a regular file"),
    ],
)
def test_serve_refuses_incomplete_or_missing_access_files_before_any_work(flags, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["serve", "-m", "act-tiny", *flags])
    assert done.exit_code == 2 and message in done.output, done.output


def test_a_short_token_is_refused(tmp_path):
    (tmp_path / "token").write_text("short\n")
    done = runner.invoke(app, ["serve", "-m", "act-tiny", "--token-file", str(tmp_path / "token")])
    assert done.exit_code == 2 and "at least 16 visible characters" in done.output
