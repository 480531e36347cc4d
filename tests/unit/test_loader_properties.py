"""Property-based tests: any malformed input to a loader (model spec, device profile, result file, sweep file) is
one clear VlabenchError naming its origin, never a traceback."""

import json
import string

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlabench.errors import InputError
from vlabench.fleet.sweep_file import expand, parse_sweep
from vlabench.hardware.devices import DeviceProfile
from vlabench.models.specs import parse_model_spec
from vlabench.results.schema import load_result
from vlabench.yaml_data import parse_yaml

PROFILES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
keys = st.one_of(
    st.sampled_from(["model", "backend", "steps", "device", "name", "placement", "seed", "vision", "timing"]),
    st.text(string.ascii_lowercase + "_", min_size=1, max_size=10),
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)),
    max_leaves=20,
)
texts = st.one_of(
    st.text(max_size=200),
    documents.map(lambda value: yaml.safe_dump(value, allow_unicode=True)),
    documents.map(lambda value: json.dumps(value)),
)


@PROFILES
@given(texts)
def test_model_spec_parser_raises_only_input_errors(text):
    try:
        parse_model_spec(text, "m.yaml")
    except InputError as exc:
        assert str(exc).startswith("m.yaml: ")


@PROFILES
@given(texts)
def test_device_profile_parser_raises_only_input_errors(text):
    try:
        parse_yaml(text, DeviceProfile, "d.yaml", "device profile")
    except InputError as exc:
        assert str(exc).startswith("d.yaml: ")


sweep_documents = st.fixed_dictionaries(
    {},
    optional={
        "fixed": st.dictionaries(keys, scalars, max_size=3),
        "matrix": st.dictionaries(keys, st.lists(st.one_of(scalars, documents), max_size=3), max_size=3),
        "exclude": st.lists(st.dictionaries(keys, scalars, max_size=2), max_size=2),
        "timeout_s": scalars,
        "out": scalars,
    },
)


@PROFILES
@given(st.one_of(texts, sweep_documents.map(yaml.safe_dump)))
def test_sweep_loader_raises_only_input_errors(text):
    try:
        expand(parse_sweep(text, "s.yaml"), "s.yaml")
    except InputError as exc:
        assert str(exc).startswith("s.yaml")


@PROFILES
@given(st.one_of(st.binary(max_size=200), texts.map(str.encode)))
def test_result_loader_raises_only_input_errors(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("results") / "r.json"
    path.write_bytes(data)
    try:
        load_result(path)
    except InputError as exc:
        assert str(exc).startswith(f"{path}: ")


@PROFILES
@given(
    st.dictionaries(
        st.sampled_from(["timing", "config", "model", "device", "energy", "run_id", "started_utc"]), documents
    )
)
def test_result_loader_on_schema_shaped_garbage_raises_only_input_errors(tmp_path_factory, fields):
    path = tmp_path_factory.mktemp("results") / "r.json"
    path.write_text(json.dumps({"schema_version": "1.0", **fields}))
    try:
        load_result(path)
    except InputError as exc:
        assert str(exc).startswith(f"{path}: ")
