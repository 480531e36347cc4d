"""Hostile files: YAML that PyYAML would silently coerce (``steps: true``, a duplicate ``model:``) is refused, and a
path that is not a regular UTF-8 text file (a FIFO, a directory, a symlink to /dev/zero, a binary) given as
``--config``, a sweep file or ``--energy-log`` is one clear InputError (exit 2): never a hang, never a traceback."""

import re
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import vlabench.commands.run
from tests.support.hostile_files import KINDS, READERS, WHAT, make_file
from vlabench.cli.app import app
from vlabench.config import LIMITS, RunConfig
from vlabench.errors import InputError
from vlabench.fleet.sweep_file import expand, parse_sweep
from vlabench.hardware.devices import DeviceProfile
from vlabench.models.specs import parse_model_spec
from vlabench.yaml_data import load_yaml, parse_yaml, read_text_file

runner = CliRunner()
PROPERTIES = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
INT_FIELDS = sorted(name for name, (_, high) in LIMITS.items() if isinstance(high, int))
FLOAT_FIELDS = sorted(name for name, (_, high) in LIMITS.items() if isinstance(high, float))
BOOL_FIELDS = ["fuse_denoise_loop", "measure_ceilings", "fuse_expert_kv"]
YAML_BOOLS = ["true", "false", "True", "yes", "no", "on", "off"]

# --- duplicate keys -------------------------------------------------------------------------------------------------

names = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8).filter(
    lambda name: load_yaml(f"{name}: 1") == {name: 1}  # not a word YAML reads as a bool or null (on, no, null, ...)
)
values = st.one_of(st.integers(-100, 100), st.text(string.ascii_letters, min_size=1, max_size=6), st.booleans())


@PROPERTIES
@given(
    mapping=st.dictionaries(names, values, min_size=1, max_size=6),
    data=st.data(),
    nested=st.booleans(),
)
def test_a_duplicate_key_anywhere_is_refused_naming_key_and_line(mapping, data, nested):
    """Any YAML mapping (top level or nested) that repeats a key is an InputError naming the key and the line of the
    repeat, for every schema vlabench reads: run configs, sweep files, model specs, device profiles."""
    keys = list(mapping)
    key = data.draw(st.sampled_from(keys))
    at = data.draw(st.integers(0, len(keys)))
    lines = [f"{k}: {yaml.safe_dump(v).splitlines()[0]}" for k, v in mapping.items()]
    lines.insert(at, f"{key}: {yaml.safe_dump(data.draw(values)).splitlines()[0]}")
    original = keys.index(key) + (1 if at <= keys.index(key) else 0)
    repeat = max(at, original)  # the later of the two occurrences, 0-based
    body = lines if not nested else ["outer:", *(f"  {line}" for line in lines)]
    offset = 1 if nested else 0
    text = "\n".join(body) + "\n"
    for schema, what in ((RunConfig, "run config"), (DeviceProfile, "device profile")):
        with pytest.raises(InputError) as raised:
            parse_yaml(text, schema, "f.yaml", what)
        message = str(raised.value)
        assert message.startswith(f"f.yaml:{repeat + 1 + offset}: ") and f"duplicate key {key!r}" in message
    with pytest.raises(InputError, match="duplicate key"):
        parse_model_spec(text, "m.yaml")
    with pytest.raises(InputError, match="duplicate key"):
        parse_sweep(text, "s.yaml")


def test_a_duplicate_model_key_is_not_silently_the_last():
    with pytest.raises(InputError, match=r"^run.yaml:2: duplicate key 'model' \(first set on line 1\)$"):
        parse_yaml("model: pi0\nmodel: smolvla\n", RunConfig, "run.yaml", "run config")
    assert load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n")["d"] == {"x": 3, "y": 2}  # an override


# --- strict scalars -------------------------------------------------------------------------------------------------


@PROPERTIES
@given(name=st.sampled_from(INT_FIELDS + FLOAT_FIELDS + BOOL_FIELDS), word=st.sampled_from(YAML_BOOLS))
def test_a_yaml_bool_is_never_a_number(name, word):
    """``steps: true`` is refused (it used to become 1); a bool field takes only a bool."""
    text = f"{name}: {word}\n"
    if name in BOOL_FIELDS:
        assert isinstance(getattr(parse_yaml(text, RunConfig, "c.yaml", "run config"), name), bool)
        return
    with pytest.raises(InputError, match=rf"c.yaml: invalid run config: {name}: "):
        parse_yaml(text, RunConfig, "c.yaml", "run config")


@PROPERTIES
@given(name=st.sampled_from(INT_FIELDS), value=st.integers(1, 50))
def test_integers_are_accepted_where_numbers_are_expected(name, value):
    if name == "max_iterations":
        value = max(value, 10)
    chunked = "execution: async\n" if name == "actions_per_chunk" else ""  # per-step executes one action
    config = parse_yaml(f"{chunked}{name}: {value}\n", RunConfig, "c.yaml", "run config")
    assert getattr(config, name) == value and type(getattr(config, name)) is int
    with pytest.raises(InputError):  # but neither 4.0 nor "4" is an integer
        parse_yaml(f"{chunked}{name}: {value}.0\n", RunConfig, "c.yaml", "run config")
    with pytest.raises(InputError):
        parse_yaml(f'{chunked}{name}: "{value}"\n', RunConfig, "c.yaml", "run config")


@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_an_integer_or_an_exponent_is_a_float(name):
    config = parse_yaml(f"{name}: 1\n", RunConfig, "c.yaml", "run config")
    assert getattr(config, name) == 1.0
    assert load_yaml(f"{name}: 1e2\n")[name] == 100.0  # YAML 1.2 float, not the string "1e2"
    for bad in (".inf", ".nan", "-.inf", "1e400"):
        with pytest.raises(InputError, match=name):
            parse_yaml(f"{name}: {bad}\n", RunConfig, "c.yaml", "run config")
    # What a sweep writes for its child (`run --config`, yaml.safe_dump of the config) reads back, extremes included.
    low, high = LIMITS[name]
    for value in (high, low + 1e-5):
        config = RunConfig(**{name: value})
        assert parse_yaml(yaml.safe_dump(config.model_dump(mode="json")), RunConfig, "run.yaml", "run config") == config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("matrix:\n  steps: [4, true]\n", "matrix.steps value True"),
        ("fixed:\n  min_duration_s: .inf\n", "fixed.min_duration_s"),
        ("timeout_s: .inf\n", "timeout_s"),
        ("timeout_s: true\n", "timeout_s"),
        ("max_retries: true\n", "max_retries"),
        ("matrix:\n  steps: [1]\nmatrix:\n  steps: [2]\n", "s.yaml:3: duplicate key 'matrix'"),
        ("exclude:\n  - {steps: yes}\n", "exclude[0].steps"),
    ],
)
def test_sweep_files_are_strict_too(text, message):
    with pytest.raises(InputError, match=re.escape(message)):
        expand(parse_sweep(text, "s.yaml"), "s.yaml")


# --- files that are not what they seem ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_guarded_reader_refuses_what_is_not_a_regular_text_file(kind, tmp_path):
    path = make_file(kind, tmp_path)
    with pytest.raises(InputError, match=r"^" + str(path) + r": the sweep file (is|contains) "):
        read_text_file(path, "sweep file")


def test_the_guarded_reader_caps_the_size_and_names_a_missing_file(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("a" * 2000)
    assert read_text_file(big, "run config", max_bytes=2000) == "a" * 2000
    with pytest.raises(InputError, match="over 0 MiB"):
        read_text_file(big, "run config", max_bytes=1999)
    with pytest.raises(InputError, match="cannot read the run config: No such file"):
        read_text_file(tmp_path / "absent.yaml", "run config")


@PROPERTIES
@given(data=st.binary(max_size=64))
def test_any_bytes_are_text_or_one_input_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "f.yaml"
    path.write_bytes(data)
    try:
        text = read_text_file(path, "run config")
    except InputError as exc:
        assert str(exc).startswith(f"{path}: the run config ")
    else:
        assert text == data.decode("utf-8") and "\0" not in text


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", ["directory", "binary", "nul"])
def test_a_directory_or_binary_file_is_one_clear_error(reader, kind, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("planned a run from a file that is not a text file")

    if reader == "config":
        monkeypatch.setattr(vlabench.commands.run, "plan_runs", refuse)
    path = make_file(kind, tmp_path)
    result = runner.invoke(app, READERS[reader](path, tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert str(path) in result.output and WHAT[reader] in result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, AssertionError)


# --- documents too deep or too large to compose ---------------------------------------------------------------------

NESTED = {
    "flow": "model: " + "[" * 5000 + "]" * 5000 + "\n",
    "block": "model:\n" + "".join(" " * (depth + 1) + "x:\n" for depth in range(400)),
}
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join(['*' + previous] * 10)}]\n"
    for previous, name in zip("abcdefghi", "bcdefghij", strict=True)
)


@pytest.mark.parametrize("text", [*NESTED.values(), LAUGHS], ids=[*NESTED, "aliases"])
def test_a_document_too_deep_or_too_large_once_expanded_is_one_clear_error(text, tmp_path):
    """Deeper than PyYAML's recursive composer can go (a RecursionError before), or a billion laughs of aliases:
    an InputError naming the file and the line, for every reader of YAML, and exit 2 from the CLI."""
    for parse in (
        lambda: parse_yaml(text, RunConfig, "f.yaml", "run config"),
        lambda: parse_model_spec(text, "m.yaml"),
        lambda: parse_sweep(text, "s.yaml"),
    ):
        with pytest.raises(InputError, match=r"\.yaml:\d+: (nested more than 32 levels deep|more than 100000 values)"):
            parse()
    config = tmp_path / "deep.yaml"
    config.write_text(text)
    refused = runner.invoke(app, ["run", "--config", str(config)])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "deep.yaml:" in " ".join(refused.stderr.split())


def test_anchors_and_merge_keys_within_the_limits_still_load():
    text = "base: &b {steps: 4, chunk: 8}\nrun:\n  <<: *b\n  steps: 6\n" + "deep: " + "[" * 30 + "]" * 30 + "\n"
    assert load_yaml(text)["run"] == {"steps": 6, "chunk": 8}
