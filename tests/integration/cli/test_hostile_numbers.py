"""Hostile numbers: every numeric setting is finite and within its documented range, refused before any work (exit 2,
one line naming the flag, no traceback); numbers that would be silently wrong (more actions than a chunk holds,
negative or out-of-order power samples, a NaN threshold, an unknown phase) are refused, not coerced."""

import itertools
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

import vlabench.commands.run
import vlabench.commands.run.execution
from vlabench.cli.app import app
from vlabench.cli.options import Bounds
from vlabench.config import LIMITS, OPEN_BELOW, SEED_LIMIT, RunConfig
from vlabench.errors import InputError
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.results.compare import MAX_THRESHOLD, Settings, check_settings
from vlabench.telemetry.energy.external import MAX_WATTS, read_power_log

runner = CliRunner()
PROPERTIES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CLI_PROPERTIES = settings(PROPERTIES, max_examples=12)  # each example is a whole CLI invocation
FLOAT_FIELDS = sorted(name for name, (_, high) in LIMITS.items() if isinstance(high, float))
INT_FIELDS = sorted(name for name, (_, high) in LIMITS.items() if isinstance(high, int))

# The flag of every bounded RunConfig field on `vlabench run`.
RUN_FLAGS = {name: "--" + name.replace("_", "-") for name in LIMITS}
RUN_FLAGS |= {
    "min_duration_s": "--min-duration",
    "max_duration_s": "--max-duration",
    "duration_s": "--duration",
    "window_s": "--window",
    "idle_probe_s": "--idle-probe",
    "sensor_period_s": "--sensor-period",
    "energy_window_s": "--energy-window",
    "idle_window_s": "--idle-window",
    "serve_duration_s": "--serve-duration",
    "request_timeout_s": "--request-timeout",
    "connect_timeout_s": "--connect-timeout",
}

hostile_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e9, 1e300, -1.0, 0.0, -0.0, 5e-324]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
)
hostile_ints = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, SEED_LIMIT - 1, SEED_LIMIT, 2**64, 100_000]),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
)


# Other fields a field is checked against, set so that only the field under test can be out of range.
COMPANIONS = {
    "min_iterations": {"max_iterations": 1_000_000},
    "max_iterations": {"min_iterations": 1},
    "actions_per_chunk": {"execution": "async"},  # per-step, the default, executes one action per inference
}


def in_range(name: str, value: float) -> bool:
    low, high = LIMITS[name]
    return math.isfinite(value) and (low < value if name in OPEN_BELOW else low <= value) and value <= high


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@PROPERTIES
@given(value=hostile_floats)
def test_every_float_setting_is_finite_and_within_its_documented_range(name, value):
    """Accepted only when finite, in range and a number (not a bool): never stored out of range to be written as
    null, never coerced."""
    try:
        config = RunConfig(**{name: value})
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == (name,)
        assert isinstance(value, bool) or not in_range(name, value)
        return
    stored = getattr(config, name)
    assert not isinstance(value, bool) and in_range(name, stored) and stored == value
    assert RunConfig.model_validate_json(config.model_dump_json()) == config  # what is written reads back


@pytest.mark.parametrize("name", INT_FIELDS)
@PROPERTIES
@given(value=hostile_ints)
def test_every_integer_setting_is_an_integer_within_its_documented_range(name, value):
    try:
        config = RunConfig(**{**COMPANIONS.get(name, {}), name: value})
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == (name,)
        assert isinstance(value, bool | float) or not in_range(name, value)
        return
    assert type(value) is int and in_range(name, value) and getattr(config, name) == value


def test_every_bounded_field_documents_its_range():
    for name in LIMITS:
        description = RunConfig.model_fields[name].description or ""
        assert re.search(r"x (≤|<) ", description), (name, description)


@pytest.fixture
def no_work(monkeypatch):
    """`vlabench run` must refuse a bad number before planning (no spec loaded, no model built)."""

    class Reached(Exception):
        pass

    def refuse(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(vlabench.commands.run, "plan_runs", refuse)
    return Reached


def number_texts(integer: bool):
    numbers = st.integers(min_value=-(2**70), max_value=2**70) if integer else st.floats()
    return st.one_of(
        numbers.map(str),
        st.sampled_from(
            ["nan", "inf", "-inf", "1e309", "-1", "0", "1e9", "1e30", str(2**63), "", "abc", "1.5", "0x10"]
        ),
    )


@pytest.mark.parametrize("name", sorted(LIMITS))
@CLI_PROPERTIES
@given(data=st.data())
def test_run_refuses_a_bad_number_for_each_flag_before_any_work(name, data, no_work):
    bounds = Bounds.run(name)
    text = data.draw(number_texts(bounds.integer))
    companions = [
        arg for field, v in COMPANIONS.get(name, {}).items() for arg in (RUN_FLAGS.get(field, f"--{field}"), str(v))
    ]
    result = runner.invoke(app, ["run", *companions, RUN_FLAGS[name], text])
    try:
        value = int(text) if bounds.integer else float(text)
        ok = in_range(name, value)
    except ValueError:
        ok = False
    if ok:
        assert isinstance(result.exception, no_work), result.output  # parsed, then stopped where work would start
    else:
        assert result.exit_code == 2, (text, result.output)
        assert f"'{RUN_FLAGS[name]}'" in result.output and "Traceback" not in result.output
        assert not isinstance(result.exception, no_work)


OTHER_FLAGS = [
    (["site", "build", "."], "--control-hz", ["nan", "inf", "0", "-1", "1e7"]),
    (["rank", "."], "--control-hz", ["nan", "inf", "0", "-5"]),
    (["compare", ".", "."], "--threshold", ["nan", "inf", "0", "-0.1", "11"]),
    (["compare", ".", "."], "--energy-threshold", ["nan", "-inf", "0", "1e3"]),
    (["compare", ".", "."], "--confidence", ["nan", "0", "1", "1.5"]),
    (["compare", ".", "."], "--resamples", ["0", "99", "10000000", "1.5"]),
    (["compare", ".", "."], "--seed", ["-1", str(2**63)]),
    (["validate", "."], "--min-iterations", ["-1", "1e3", str(2**70)]),
    (["validate", "."], "--min-duration", ["nan", "inf", "-1", "1e9"]),
    (["sweep", "missing.yaml"], "--timeout-s", ["nan", "inf", "0", "-1", "1e9"]),
    (["loop"], "--cycles", ["0", "-1", "1e9", str(10**9)]),
    (["loop"], "--warmup", ["-1", str(10**9)]),
    (["loop"], "--fusion-stale-steps", ["-1", str(10**9)]),
    (["profile"], "--iterations", ["0", str(10**9)]),
    (["profile"], "--sample-ms", ["nan", "inf", "0", "-1", "1e9"]),
    (["profile"], "--min-duration", ["inf", "-1"]),
    (["worker"], "--port", ["0", "65536", "-1"]),
    (["worker"], "--num-cpus", ["-1", str(10**9)]),
    (["site", "serve", "."], "--port", ["-1", "65536"]),
]


@pytest.mark.parametrize(
    ("command", "flag", "values"), OTHER_FLAGS, ids=[f"{' '.join(c[:2])} {f}" for c, f, _ in OTHER_FLAGS]
)
def test_every_other_numeric_option_refuses_non_finite_and_absurd_values(command, flag, values, tmp_path):
    for value in values:
        result = runner.invoke(app, [*command, flag, value])
        assert result.exit_code == 2, (flag, value, result.output)
        assert f"'{flag}'" in result.output and "Traceback" not in result.output, result.output


@pytest.mark.parametrize(
    ("bounds", "text"),
    [(Bounds(0.0, 10.0, open_below=True), "nan"), (Bounds(1, 5, integer=True), "5.0"), (Bounds(0.0, 1.0), "inf")],
)
def test_the_shared_parser_reports_what_is_wrong(bounds, text):
    with pytest.raises(Exception, match=r"finite|integer"):
        bounds.parse(text)


@PROPERTIES
@given(low=st.floats(-1e6, 1e6), span=st.floats(0, 1e6), open_below=st.booleans(), text=number_texts(False))
def test_bounds_accept_exactly_the_finite_numbers_in_range(low, span, open_below, text):
    bounds = Bounds(low, low + span, open_below=open_below)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    inside = math.isfinite(value) and (low < value if open_below else low <= value) and value <= low + span
    try:
        parsed = bounds.parse(text)
    except Exception as exc:
        assert type(exc).__name__ == "BadParameter" and not inside
    else:
        assert inside and parsed == value


# --- silently wrong numbers ---------------------------------------------------------------------------------------


@PROPERTIES
@given(chunk=st.one_of(st.none(), st.integers(1, 64)), actions=st.one_of(st.none(), st.integers(1, 200)))
def test_a_chunk_never_executes_more_actions_than_it_holds(chunk, actions):
    spec = load_model_spec("smolvla-tiny")
    length = chunk or spec.action.chunk
    try:
        workload = Workload.from_spec(spec, chunk=chunk, actions_per_chunk=actions)
    except InputError as exc:
        assert actions is not None and actions > length
        assert f"--actions-per-chunk {actions}" in str(exc) and f"chunk length {length}" in str(exc)
        return
    assert workload.actions_per_chunk <= workload.chunk == length


def test_run_refuses_more_actions_per_chunk_than_the_models_chunk(tmp_path, monkeypatch):
    def measure(*args, **kwargs):
        raise AssertionError("measured a chunk executing more actions than it holds")

    monkeypatch.setattr(vlabench.commands.run.execution, "execute_many", measure)
    chunked = ["--execution", "async"]
    result = runner.invoke(
        app, ["run", "-m", "smolvla-tiny", *chunked, "--actions-per-chunk", "1000", "-o", str(tmp_path)]
    )
    assert result.exit_code == 2 and "more than the chunk length" in result.output, result.output
    both = runner.invoke(app, ["run", *chunked, "--chunk", "10", "--actions-per-chunk", "11", "-o", str(tmp_path)])
    assert both.exit_code == 2 and "--actions-per-chunk" in both.output and "chunk length 10" in both.output
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--min-iterations", "50", "--max-iterations", "5"], "--max-iterations"),
        (["--tdp-w", "10", "--idle-w", "20"], "--idle-w"),
    ],
)
def test_contradicting_flags_are_refused_not_silently_resolved(args, flag, no_work):
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2 and f"invalid option: {flag}" in result.output, result.output


@PROPERTIES
@given(
    threshold=st.floats(allow_nan=True, allow_infinity=True),
    phase=st.one_of(st.sampled_from(["e2e", "prefix", "action", "e2ee", "E2E", "", "denoise_step[3]"]), st.text()),
)
def test_compare_settings_that_would_skip_or_falsify_the_check_are_refused(threshold, phase):
    known = phase in {"vision", "prefill", "prefix", "denoise_step", "action", "e2e", "e2e_unsynced"} or bool(
        re.fullmatch(r"denoise_step\[\d+\]", phase)
    )
    valid_threshold = math.isfinite(threshold) and 0 < threshold <= MAX_THRESHOLD
    try:
        check_settings(Settings(threshold=threshold, phase=phase))
    except InputError as exc:
        assert not (known and valid_threshold)
        assert ("--threshold" in str(exc)) if not valid_threshold else ("phase" in str(exc))
    else:
        assert known and valid_threshold


def test_compare_with_an_unknown_phase_exits_2_instead_of_passing(tmp_path):
    result = runner.invoke(app, ["compare", str(tmp_path), str(tmp_path), "--phase", "e2ee"])
    assert result.exit_code == 2 and "Did you mean 'e2e'" in result.output


# --- power logs -----------------------------------------------------------------------------------------------------

cells = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**8), 10**8).map(str),
    st.sampled_from(["nan", "inf", "-1", "1e7", "", "x", "2026-11-30T10:00:00Z", "-0"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00"), max_size=8),
)
rows = st.lists(st.tuples(cells, cells), max_size=12)


@PROPERTIES
@given(rows=rows, header=st.booleans(), terminated=st.booleans())
@example(rows=[("0", "40"), ("1", "-5"), ("2", "40")], header=True, terminated=True)
@example(rows=[("0", "40"), ("2", "40"), ("1", "40")], header=False, terminated=True)
@example(rows=[("0", "40"), ("0", "40")], header=False, terminated=True)
@example(rows=[("0", "40"), ("1", "inf")], header=False, terminated=True)
def test_a_power_log_is_read_exactly_or_refused_naming_file_and_line(tmp_path_factory, rows, header, terminated):
    """Whatever the rows hold, the reader returns finite, non-negative, bounded watts at strictly increasing times
    (so no integral can be negative or double-count), or raises an InputError naming the file (and line)."""
    log: Path = tmp_path_factory.mktemp("log") / "wall.csv"
    text = ("timestamp,watts\n" if header else "") + "\n".join(f"{t},{w}" for t, w in rows)
    log.write_text(text + ("\n" if terminated and rows else ""))
    try:
        samples = read_power_log(log)
    except InputError as exc:
        assert str(exc).startswith(f"{log}")
        return
    assert all(math.isfinite(t) and math.isfinite(w) and 0 <= w <= MAX_WATTS for t, w in samples)
    assert all(a[0] < b[0] for a, b in itertools.pairwise(samples))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("0,40\n1,-5\n2,40\n", ":2: power -5 W outside"),
        ("0,40\n2,40\n1,40\n", ":3: timestamp goes back"),
        ("0,40\n1,40\n1,40\n", ":3: timestamp repeats"),
        ("0,40\n1,2e6\n", ":2: power 2e+06 W"),
    ],
)
def test_a_bad_power_row_is_named_by_file_and_line(tmp_path, content, message):
    log = tmp_path / "wall.csv"
    log.write_text(content)
    with pytest.raises(InputError, match=re.escape(f"{log}{message}")):
        read_power_log(log)


def test_run_refuses_a_malformed_power_log_before_measuring(tmp_path, monkeypatch):
    def measure(*args, **kwargs):
        raise AssertionError("measured with a power log that holds negative watts")

    monkeypatch.setattr(vlabench.commands.run.execution, "execute_many", measure)
    log = tmp_path / "wall.csv"
    log.write_text("timestamp,watts\n0,40\n1,-40\n")
    result = runner.invoke(app, ["run", "-m", "smolvla-tiny", "--energy-log", str(log), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and f"{log}:3: power -40 W" in result.output, result.output
    assert not list(tmp_path.glob("out/**/*.json"))
