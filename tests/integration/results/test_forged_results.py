"""Forged results (``tests/support/forgeries.py``): impossible results made from three real ones (a plain run, robots
served in process, robots served over gRPC) are refused by every reader with the broken rule named, at any magnitude
hypothesis draws; the fixed corpus of them is refused by ``validate``, ``rank``, ``compare`` and ``site build``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.support.forgeries import FORGERIES, RESULTS, base_document, result_of
from tests.support.paths import ROOT
from vlabench.cli.app import app
from vlabench.measure.stats import Stats, summarize
from vlabench.results.relation_terms import wall_seconds
from vlabench.results.schema import load_result
from vlabench.results.validate import Requirements, validate_file

runner = CliRunner()
LOOSE = Requirements(min_iterations=1, min_duration_s=0, allow_dirty=True)
DOCS = ROOT / "docs" / "measurement.md"


def documented_rules() -> list[str]:
    """The rule names docs/measurement.md lists (the first column of its table of rules)."""
    text = DOCS.read_text()
    table = text[text.index("| rule | what must hold |") :].split("\n\n", 1)[0]
    return [line.split("|")[1].strip() for line in table.splitlines()[2:]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    """Every forgery at its default magnitude in one folder, the real results in another."""
    root = tmp_path_factory.mktemp("forged")
    bad, good = root / "bad", root / "good"
    bad.mkdir()
    good.mkdir()
    for index, forgery in enumerate(FORGERIES):
        (bad / f"forged-{index:02d}.json").write_text(json.dumps(forgery.document()))
    for kind in ("plain", "served", "offload"):
        (good / f"{kind}.json").write_text(json.dumps(base_document(kind)))
    return bad, good


def test_the_real_results_satisfy_every_relation():
    """A plain run, robots served in process and robots served over gRPC by a server with the default timing (its
    34 s baseline pass timed before its robots' 10 s: compared like with like, never with the robots' window)."""
    for kind in ("plain", "served", "offload"):
        [path] = (RESULTS / kind).glob("*.json")
        assert load_result(path).physical_problems() == [], kind
    offload = load_result(next((RESULTS / "offload").glob("*.json")))
    assert offload.serving.transport == "grpc" and offload.timing.timed_duration_s > wall_seconds(offload)


def test_the_corpus_breaks_every_documented_rule_on_every_kind_of_result():
    assert len(FORGERIES) >= 40
    assert {forgery.base for forgery in FORGERIES} == {"plain", "served", "offload"}
    forged = {forgery.rule for forgery in FORGERIES}
    assert set(documented_rules()) - forged == set(), "a documented rule no forgery breaks"
    assert forged - set(documented_rules()) == set(), "a forged rule the docs do not list"


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_forgery_at_any_magnitude_is_refused_with_its_rule_named(data):
    forgery = data.draw(st.sampled_from(FORGERIES), label="forgery")
    magnitude = data.draw(st.floats(forgery.low, forgery.high), label="magnitude")
    problems = result_of(forgery.document(magnitude)).physical_problems()
    assert any(field.startswith(forgery.field) and forgery.rule in message for field, message in problems), (
        forgery.name,
        magnitude,
        problems,
    )


@pytest.mark.parametrize("forgery", FORGERIES, ids=[forgery.name for forgery in FORGERIES])
def test_each_forgery_is_refused_by_validate_naming_its_field_and_rule(forgery, corpus):
    path = corpus[0] / f"forged-{FORGERIES.index(forgery):02d}.json"
    problems = validate_file(path, LOOSE)
    assert any(p.field.startswith(forgery.field) and forgery.rule in p.message for p in problems), problems


def test_validate_refuses_the_whole_corpus_and_passes_the_real_results(corpus):
    bad, good = corpus
    flags = ["--allow-dirty", "--min-iterations", "1", "--min-duration", "0", "--json"]
    checked = runner.invoke(app, ["validate", str(bad), *flags])
    assert checked.exit_code == 6
    problems = json.loads(checked.stdout)
    for index, forgery in enumerate(FORGERIES):
        mine = [p["message"] for p in problems if p["file"].endswith(f"forged-{index:02d}.json")]
        assert any(forgery.rule in message for message in mine), (forgery.name, mine)
    assert runner.invoke(app, ["validate", str(good), *flags]).exit_code == 0


def skipped_lines(said: str) -> dict[str, str]:
    """Each skipped file's name → what the command said about it (the console may wrap lines anywhere)."""
    joined = " ".join(said.split())
    found = re.finditer(r"(forged-\d\d\.json): (.*?)(?= skipped |$)", joined)
    return {match.group(1): match.group(2) for match in found}


@pytest.mark.parametrize("command", ["rank", "compare", "site"])
def test_every_reader_skips_every_forgery_naming_its_rule(command, corpus, tmp_path):
    bad, good = corpus
    args = {
        "rank": ["rank", str(bad), str(good), "--json"],
        "compare": ["compare", str(bad), str(good), "--json"],
        "site": ["site", "build", str(bad), str(good), "-o", str(tmp_path / "site"), "--no-projected"],
    }[command]
    outcome = runner.invoke(app, args)
    assert outcome.exit_code == 0, outcome.output
    said = skipped_lines(outcome.stderr)
    for index, forgery in enumerate(FORGERIES):
        name = f"forged-{index:02d}.json"
        assert name in said and forgery.rule in said[name], (forgery.name, said.get(name))
    shown = outcome.stdout if command != "site" else (tmp_path / "site" / "leaderboard.json").read_text()
    assert not any(forgery.run_id in shown for forgery in FORGERIES)  # never ranked


def test_a_judged_p99_never_trusts_a_recorded_interval():
    """p99's interval [0.5, 0.6] × the fastest sample, or an upper end claimed for too few samples, is not judged:
    the slowest sample is."""
    many = summarize([10.0 + i / 100 for i in range(400)])
    assert many.judged_p99() == (many.intervals["p99"][1], "the upper end of p99's 95% interval")
    forged = many.model_copy(update={"intervals": {**many.intervals, "p99": (0.5 * many.min, 0.6 * many.min)}})
    assert forged.judged_p99()[0] == many.max and "recorded interval" in forged.judged_p99()[1]
    few = summarize([10.0, 11.0, 12.0])
    claimed = few.model_copy(update={"intervals": {**few.intervals, "p99": (10.0, 10.5)}})
    assert claimed.judged_p99() == (12.0, few.judged_p99()[1]) and "not enough samples" in few.judged_p99()[1]
    assert Stats(**{**many.model_dump(), "intervals": {}}).judged_p99() == (many.p99, "p99")  # before schema 1.3


def test_require_measured_energy_takes_only_a_known_sensors_measurement(tmp_path):
    labelled = next(forgery for forgery in FORGERIES if forgery.rule == "label of the method")
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(labelled.document()))
    strict = Requirements(min_iterations=1, min_duration_s=0, allow_dirty=True, require_measured_energy=True)
    assert {"energy.label"} <= {p.field for p in validate_file(path, strict)}
    unknown = base_document("plain")
    unknown["energy"].update(method="my-sensor", label="measured")
    unknown["energy"]["meter"].update(method="my-sensor", label="measured")
    unknown["cost"]["energy_label"] = "measured"
    path.write_text(json.dumps(unknown))
    assert validate_file(path, LOOSE) == []  # an unknown method is not impossible
    [problem] = validate_file(path, strict)
    assert problem.field == "energy.label" and "not measured by a known sensor" in problem.message


def test_a_folder_holding_a_json_that_is_no_result_does_not_pass_validate(corpus, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "real.json").write_text((corpus[1] / "plain.json").read_text())
    (folder / "notes.json").write_text('{"comment": "not a result"}')
    (folder / "other.json").write_text('{"kind": "spreadsheet"}')
    flags = ["--allow-dirty", "--min-iterations", "1", "--min-duration", "0", "--json"]
    checked = runner.invoke(app, ["validate", str(folder), *flags])
    assert checked.exit_code == 6
    problems = {(Path(p["file"]).name, p["field"]): p["message"] for p in json.loads(checked.stdout)}
    assert set(problems) == {("notes.json", "<file>"), ("other.json", "kind")}
    assert all("not a vlabench artifact" in message for message in problems.values())
    only = tmp_path / "only"
    only.mkdir()
    (only / "notes.json").write_text("[1, 2]")
    alone = runner.invoke(app, ["validate", str(only)])
    assert alone.exit_code == 2 and "not a vlabench artifact" in " ".join(alone.stderr.split())
