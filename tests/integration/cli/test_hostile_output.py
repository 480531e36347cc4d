"""Untrusted strings at every output boundary: Rich markup and terminal escape sequences in names, paths and messages
reach the terminal as text (never as tags or control sequences, never as a traceback in the error handler), CSV
cells cannot start a spreadsheet formula, and plotly shows names as text (no live link in a chart)."""

import csv
import io
import json
import re
import uuid

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from tests.support.hostile import BASE, mutated, write
from vlabench.analysis.roofline import RooflineReport
from vlabench.cli.app import app
from vlabench.cli.views.checks import compare_table, problems_table
from vlabench.cli.views.console import printable, safe
from vlabench.leaderboard_site import charts
from vlabench.leaderboard_site.build import DOWNLOAD_COLUMNS, write_downloads
from vlabench.results.compare import Energy, Latency, Match, Report, Settings
from vlabench.results.validate import Problem

runner = CliRunner()
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FRAGMENTS = [
    "[/oops]",
    "[/]",
    "[bold red]",
    "[link=https://example.com]",
    "\x1b[31m",
    "\x1b]0;retitled\x07",
    "\x1b]8;;https://example.com\x1b\\",
    "\x9b2J",
    "\x07",
    "\r",
    "\x08",
    "\u202e",
    '=HYPERLINK("https://example.com","x")',
    "+1",
    "-1",
    "@SUM(A1)",
    "\t=1",
    "<a href='https://example.com'>x</a>",
    "<b>",
    "&amp;",
]
hostile = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), min_size=1, max_size=4).map("".join)
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def rendered(*renderables, width: int = 200) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
    for renderable in renderables:
        console.print(renderable)
    return console.file.getvalue()


@FAST
@given(hostile)
@example("\x1b[31mred[/oops]")
def test_data_reaches_the_terminal_as_text(text):
    shown = printable(text)
    assert not RAW_CONTROL.search(shown)
    assert rendered(safe(text), width=10_000) == shown + "\n"  # markup shown as typed, never parsed


@FAST
@given(hostile, hostile, hostile)
def test_the_check_tables_render_any_string(label, phase, message):
    latency = Latency(
        baseline_p50_ms=10, candidate_p50_ms=12, relative_change=0.2, ci_low=0.1, ci_high=0.3, verdict="regression"
    )
    energy = Energy(
        baseline_j_per_action=1, candidate_j_per_action=1, relative_change=0, verdict="unchanged", note=message
    )
    match = Match(
        config_hash="h",
        label=label,
        baseline="b",
        candidate="c",
        latency=latency,
        energy=energy,
        correctness_regressed=True,
        candidate_invalid_reason=message,
    )
    report = Report(settings=Settings(phase=phase), matches=[match], only_baseline=[], only_candidate=[], skipped=[])
    output = rendered(compare_table(report), problems_table([Problem(file=label, field=phase, message=message)]))
    assert not RAW_CONTROL.search(output)
    assert "INVALID" in output and "regression" in output


@SLOW
@given(hostile, hostile)
@example("\x1b[31mevil\x1b[0m", "[/oops]")
@example("=HYPERLINK(1)", "\x9b2J[bold]")
def test_rank_shows_names_from_results_as_text(tmp_path_factory, model, device):
    folder = tmp_path_factory.mktemp("names")
    document = mutated(("names", lambda d: None, ""), run_id=uuid.uuid4().hex)
    document["model"]["name"], document["device"]["profile"] = model, device
    write(folder, "named.json", document)
    result = runner.invoke(app, ["rank", str(folder), "--priority", "time", "--control-hz", "0.1"])
    assert result.exit_code == 0 and result.exception is None, result.output
    assert not RAW_CONTROL.search(result.output.replace("\n", ""))
    if "\n" not in model and len(model) < 30:
        assert printable(model).strip() in result.stdout


@FAST
@given(hostile.filter(lambda text: "\x00" not in text and "/" not in text and text.strip(".") != ""))
@example("[/oops]")
@example("\x1b]0;retitled\x07")
def test_errors_about_paths_and_names_are_text(tmp_path_factory, name):
    """The error handler prints messages holding paths and option values as typed: exit 2 (or validate's 6 with
    the problem table), never a traceback from the message itself."""
    folder = tmp_path_factory.mktemp("paths")
    write(folder / "results", "good.json", BASE)
    missing = folder / name
    invocations = (
        (["rank", str(missing)], 2),
        (["validate", str(missing)], 6),
        (["rank", "--priority", name, str(folder / "results")], 2),
    )
    for args, code in invocations:
        result = runner.invoke(app, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        assert result.exit_code == code, (args, result.output)
        assert not RAW_CONTROL.search(result.output.replace("\n", "")), result.output
        assert "error:" in result.output or code == 6


def _rows(texts: list[str]) -> list[dict]:
    rows = []
    for index, text in enumerate(texts):
        row = {column: None for column in DOWNLOAD_COLUMNS}
        row.update(
            model=text, device=text, backend=text, precision=text, reasons=text, source=text, invalid_reason=text
        )
        row.update(latency_p50_ms=-1.5 if index % 2 else 3.0, rank=index + 1, valid=True)
        rows.append(row)
    return rows


@FAST
@given(st.lists(hostile, min_size=1, max_size=5))
@example(['=HYPERLINK("https://example.com","x")', "+1", "-1", "@SUM(A1)", "\t=1"])
def test_csv_cells_never_start_a_formula(tmp_path_factory, texts):
    site = tmp_path_factory.mktemp("csv")
    write_downloads(site, _rows(texts), "cost", 10.0)
    with (site / "leaderboard.csv").open(newline="") as handle:
        cells = list(csv.DictReader(handle))
    for text, row in zip(texts, cells, strict=True):
        for column in ("model", "device", "backend", "precision", "reasons", "source", "invalid_reason"):
            value = row[column]
            assert not value.startswith(FORMULA), (column, value)
            assert value == (f"'{text}" if text.startswith(FORMULA) else text), (column, value)
    assert [row["latency_p50_ms"] for row in cells][: len(texts)] == [
        "-1.5" if i % 2 else "3.0" for i in range(len(texts))
    ]  # numbers stay numbers
    document = json.loads((site / "leaderboard.json").read_text())
    assert [row["model"] for row in document["rows"]] == texts  # the JSON download holds the names as they are


def _strings(value, key=""):
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for child, item in value.items():
            yield from _strings(item, child)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, key)


ROOFLINE = RooflineReport.model_validate(BASE["roofline"])


@FAST
@given(hostile, hostile, hostile, hostile)
@example("<a href='https://example.com'>pi0</a>", "rtx", "<a href='https://example.com'>bf16</a>", "detail")
def test_no_name_becomes_markup_in_a_chart(model, device, precision, detail):
    ceilings = [c.model_copy(update={"detail": detail}) for c in ROOFLINE.ceilings]
    report = ROOFLINE.model_copy(
        update={"model": model, "device": device, "precision": precision, "ceilings": ceilings}
    )
    figure = charts.roofline_chart(report)
    assert figure is not None
    for key, text in _strings(figure.to_plotly_json()):
        assert "<" not in text and ">" not in text, (key, text)
    title = figure.layout.title.text
    assert charts.label(model) in title and charts.label(precision) in title


def test_a_site_of_hostile_names_is_inert(tmp_path):
    names = ["<a href='https://example.com'>x</a>", "=HYPERLINK(1)", "[/oops]\x1b[31m"]
    for index, name in enumerate(names):
        document = mutated(("names", lambda d: None, ""), run_id=f"{index:032x}")
        document["model"]["name"] = document["precision"] = name
        document["roofline"]["precision"] = name
        write(tmp_path / "results", f"r{index}.json", document)
    site = tmp_path / "site"
    result = runner.invoke(app, ["site", "build", str(tmp_path / "results"), "-o", str(site)])
    assert result.exit_code == 0, result.output
    with (site / "leaderboard.csv").open(newline="") as handle:
        models = {row["model"] for row in csv.DictReader(handle)}
    assert "'=HYPERLINK(1)" in models and "=HYPERLINK(1)" not in models
    for path in site.rglob("*"):
        if path.suffix in (".html", ".js") and path.parent.name != "assets":
            text = path.read_text()
            assert "<a href='https://example.com'>" not in text, path  # a name is text, never markup
    roofline = "".join(path.read_text() for path in (site / "charts").glob("roofline-*.js"))
    assert "\\u0026lt;a href='https://example.com'\\u0026gt;x\\u0026lt;/a\\u0026gt;" in roofline  # text, not a link


def test_a_results_folder_named_like_markup_is_printed_as_typed(fast_run, tmp_path):
    """The success path prints the result's path inside a styled line: the path's brackets stay text."""
    from typer.testing import CliRunner

    from vlabench.cli import app

    out = tmp_path / "runs[/oops][bold]"
    args = ["run", "-m", "smolvla-tiny", "-o", str(out), *fast_run.args()]
    done = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert done.exit_code == 0, done.output
    assert "Traceback" not in done.output
    lines = [line for line in done.output.splitlines() if line.startswith("result: ")]
    assert len(lines) == 1 and lines[0].startswith(f"result: {out}/"), done.output
