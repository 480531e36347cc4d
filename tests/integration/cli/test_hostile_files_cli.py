"""A FIFO or /dev/zero given as ``--config``, a sweep file or ``--energy-log`` never hangs the installed CLI: one
clear error (exit 2), no traceback, in a child process with a deadline."""

import os
import subprocess
import sys

import pytest

from tests.support.hostile_files import READERS, WHAT, make_file


def cli(*args: str) -> subprocess.CompletedProcess:
    """The installed CLI in a child with a deadline: a regression that blocks on a FIFO fails here, visibly."""
    return subprocess.run(
        [sys.executable, "-m", "vlabench", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_dev_zero_never_hangs_the_cli(reader, kind, tmp_path):
    path = make_file(kind, tmp_path)
    completed = cli(*READERS[reader](path, tmp_path / "out"))
    assert completed.returncode == 2, completed.stderr
    assert f"{path}: the {WHAT[reader]} is a " in completed.stderr.replace("\n", "")
    assert "Traceback" not in completed.stderr + completed.stdout
