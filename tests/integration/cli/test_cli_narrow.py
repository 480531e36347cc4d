"""80-column terminals: the names a user types next (models, device profiles, backends) stay whole, no line is wider
than the terminal, and a multi-backend run still prints each backend's control, energy and cost verdicts.

vlabench's consoles take their width from ``$COLUMNS`` whenever it is set, even when the output is not a terminal
(``cli/views/console.py``); CliRunner's output is not one, so setting COLUMNS for the invocation is how these tests
lay the tables out exactly as an 80-column terminal would. Without COLUMNS, a file or pipe gets 160 columns."""

import json
import re

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from vlabench.cli.app import app
from vlabench.hardware.devices import all_profiles
from vlabench.models.specs import model_names

runner = CliRunner()
WIDTH = 80
BACKENDS = ("torch", "onnxruntime")


def invoke(*args: str, columns: int | None = WIDTH):
    env = {"COLUMNS": str(columns) if columns else None}  # None: COLUMNS unset, as in a plain pipe
    result = runner.invoke(app, list(args), env=env, terminal_width=columns or WIDTH)
    assert result.exit_code == 0, result.output
    return result.stdout


def assert_fits(text: str, width: int = WIDTH) -> None:
    for line in text.splitlines():
        assert cell_len(line) <= width, line


def whole_cell(name: str) -> str:
    """A table cell holding exactly ``name``: not cut (…), not wrapped onto the next line."""
    return rf"│ {re.escape(name)} +│"


@pytest.fixture(scope="module")
def multi_backend_run(fast_run, tmp_path_factory):
    """One run of two backends at 80 columns: its stdout and the folder of its results."""
    out = tmp_path_factory.mktemp("narrow-run")
    stdout = invoke(
        "run",
        *("--model", "smolvla-tiny", "--backend", ",".join(BACKENDS), "--out", str(out)),
        *fast_run.args(energy_meter="estimated"),
        *("--energy-window", "1", "--idle-window", "0.1"),  # the shortest windows: the verdicts print all the same
    )
    return stdout, out


def test_models_keeps_every_name_whole():
    text = invoke("models")
    for name in model_names():
        assert re.search(whole_cell(name), text), name
    assert "…" not in text
    assert_fits(text)


def test_devices_keeps_every_profile_name_whole():
    text = invoke("devices")
    for profile in all_profiles():
        assert re.search(whole_cell(profile.name), text), profile.name
    assert "…" not in text
    assert_fits(text)


def test_piped_output_keeps_every_column():
    """Without COLUMNS the output is laid out for 160 columns: every column, still wider than 80."""
    models, devices = invoke("models", columns=None), invoke("devices", columns=None)
    for header in ("published", "Δ", "image", "tok/cam", "cams", "prefix tok", "backbone", "action head"):
        assert header in models
    for header in ("name", "kind", "memory GB", "BW GB/s", "peak TFLOP/s", "TDP W", "price USD"):
        assert header in devices
    assert max(map(cell_len, models.splitlines())) > WIDTH
    assert_fits(models, 160)


def test_multi_backend_run_prints_every_verdict(multi_backend_run):
    text, out = multi_backend_run
    written = [line for line in text.splitlines() if line.startswith("result: ")]
    assert len(written) == len(BACKENDS)
    for line in written:  # a path is never broken; the terminal wraps it
        assert (out / line.removeprefix("result: ")).is_file()
    assert_fits("\n".join(line for line in text.splitlines() if line not in written))
    for backend in BACKENDS:
        assert re.search(whole_cell(backend), text), backend
    headings = [text.index(f"\n{backend} fp32\n") for backend in BACKENDS]
    sections = [text[start:end] for start, end in zip(headings, [*headings[1:], len(text)], strict=True)]
    for backend, section in zip(BACKENDS, sections, strict=True):
        flat = " ".join(section.split())
        assert re.search(r"control .* → (MEETS|MISSES) the 10 Hz target", flat), backend
        assert re.search(r"energy ESTIMATED .* J/action", flat), backend
        assert re.search(r"cost \$\S+ per 1M actions", flat), backend
        assert re.search(r"feasible (yes|no) ", flat), backend


def test_rank_keeps_model_device_and_backend_whole(multi_backend_run):
    _, out = multi_backend_run
    text = invoke("rank", str(out), "--control-hz", "1000")  # every run misses: the reason column is filled
    results = [json.loads(path.read_text()) for path in out.glob("*.json")]
    assert len(results) == len(BACKENDS)
    for result in results:
        names = (result["model"]["name"], result["device"]["profile"], result["backend"])
        assert re.search(r"│ " + r" +│ ".join(map(re.escape, names)) + r" +│", text), names  # one row, each whole
    assert "…" not in text
    assert_fits(text)
