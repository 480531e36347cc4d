"""Meters that run a vendor binary: the recorded tool, as a child process on PATH, read by the meter while it runs."""

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.support.recorded import recorded_lines
from vlabench.telemetry.energy import TegrastatsMeter


@pytest.fixture
def fake_tegrastats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable named tegrastats on PATH that prints a recorded line every --interval milliseconds."""
    script = tmp_path / "tegrastats"
    line = recorded_lines("tegrastats_jp6.txt")[0]
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "assert sys.argv[1] == '--interval'\n"
        "while True:\n"
        f"    print({line!r}, flush=True)\n"
        "    time.sleep(int(sys.argv[2]) / 1000)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return script


def test_tegrastats_meter_runs_the_binary(fake_tegrastats: Path):
    with TegrastatsMeter(interval_ms=50) as meter:
        time.sleep(0.2)
        meter.start()
        time.sleep(0.2)
        reading = meter.stop()
    assert reading.samples >= 1
    assert reading.average_w == pytest.approx(4.861)
    assert meter.describe()["command"] == "tegrastats --interval 50"
