"""The artifact header: every JSON artifact carries kind and schema_version; readers select run results by kind, never
by file name; files written before the header (run schema 1.0 and the unversioned others) still load."""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import typing
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support.paths import LEGACY_DP_CACHE, LEGACY_FIDELITY, LEGACY_LOOP, LEGACY_PROFILE, LEGACY_RUN
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.trace_writer import ChromeTrace
from vlabench.results.aggregate import load_results
from vlabench.results.artifacts import ARTIFACTS, artifact_types, kind_of, load_artifact
from vlabench.results.calibration import DPCacheCalibration
from vlabench.results.compare import Settings, compare_folders
from vlabench.results.fidelity_artifact import FidelityReport
from vlabench.results.header import ArtifactHeader, artifact_kind
from vlabench.results.loop_artifact import LoopResult
from vlabench.results.profile_artifact import ProfileResult
from vlabench.results.schema import SCHEMA_VERSION, RunResult, load_result, write_result
from vlabench.results.sweep_record import MARKER_SUFFIX, RunRecord
from vlabench.results.validate import Requirements, result_files, validate_file

KINDS = {
    "run": RunResult,
    "profile": ProfileResult,
    "loop": LoopResult,
    "fidelity": FidelityReport,
    "dp-cache": DPCacheCalibration,
    "sweep-run": RunRecord,
}
PACKAGES = ("vlabench", "vlabench.backends", "vlabench.kernels", "vlabench.leaderboard_site", "vlabench.profiles")
"""vlabench and the packages installed into it from top-level folders (as in test_architecture)."""
NOW = datetime(2026, 12, 1, 5, 0, tzinfo=timezone.utc)


def _legacy(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def run() -> RunResult:
    """A current (schema 1.2) run result."""
    return RunResult.model_validate(_legacy(LEGACY_RUN)).model_copy(
        update={"schema_version": SCHEMA_VERSION, "run_id": "1" * 32}
    )


@pytest.fixture(scope="module")
def profile() -> ProfileResult:
    return ProfileResult.model_validate(_legacy(LEGACY_PROFILE)).model_copy(update={"finished_utc": NOW})


@pytest.fixture(scope="module")
def loop() -> LoopResult:
    return LoopResult.model_validate(_legacy(LEGACY_LOOP))


@pytest.fixture(scope="module")
def calibration() -> DPCacheCalibration:
    schedule = DPCacheSchedule.model_validate(_legacy(LEGACY_DP_CACHE))
    return DPCacheCalibration(started_utc=NOW, finished_utc=NOW, model="smolvla-tiny", schedule=schedule)


@pytest.fixture(scope="module")
def record() -> RunRecord:
    config = RunConfig(model="smolvla-tiny", backend="torch", precision="fp32").model_dump(mode="json")
    return RunRecord(
        key="0123456789abcdef",
        label="backend=torch",
        status="failed",
        reason="exit code 1: error: boom",
        wall_s=3.0,
        started_utc=NOW - timedelta(seconds=3),
        finished_utc=NOW,
        config=config,
    )


@pytest.mark.parametrize("cls", ARTIFACTS, ids=lambda cls: cls.__name__)
def test_every_artifact_extends_the_header_with_its_own_kind_and_a_schema_version(cls):
    assert issubclass(cls, ArtifactHeader)
    assert set(ArtifactHeader.model_fields) <= set(cls.model_fields)
    kind = cls.model_fields["kind"].default
    assert typing.get_args(cls.model_fields["kind"].annotation) == (kind,)  # Literal[kind]: nothing else validates
    assert artifact_types()[kind] is cls
    assert isinstance(cls.model_fields["schema_version"].default, str) and cls.model_fields["schema_version"].default
    assert list(cls.model_fields)[:2] == ["kind", "schema_version"]  # written first: readers tell kinds from the head
    for name in ("started_utc", "finished_utc"):
        assert "AwareDatetime" in str(cls.model_fields[name].annotation)


def test_kinds_are_distinct_and_the_run_schema_is_1_5():
    kinds = [kind_of(cls) for cls in ARTIFACTS]
    assert len(set(kinds)) == len(kinds) and kinds[0] == "run"
    assert artifact_types() == KINDS
    assert SCHEMA_VERSION == "1.6" and RunResult.model_fields["schema_version"].default == "1.6"


def _package_modules() -> list[str]:
    """Every module of the package (``__main__`` modules run a program when imported: left out)."""
    names: set[str] = set()
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names.update(info.name for info in pkgutil.walk_packages(path, f"{package}.", onerror=_raise))
    return sorted(name for name in names if name.rsplit(".", 1)[-1] != "__main__")


def _raise(name: str) -> None:
    raise ImportError(f"cannot import {name} while walking the package")


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_the_registry_lists_every_artifact_class_defined_in_the_package():
    for name in _package_modules():
        importlib.import_module(name)
    defined = {
        cls
        for cls in _subclasses(ArtifactHeader)
        if cls.__module__.startswith("vlabench.") and isinstance(cls.model_fields["kind"].default, str)
    }  # a class without a kind of its own (MeasuredArtifact) is a header, not an artifact
    assert len(defined) >= len(KINDS)
    missing = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in defined - set(ARTIFACTS))
    assert not missing, f"add these to vlabench.results.artifacts.ARTIFACTS: {missing}"
    assert len(ARTIFACTS) == len(set(ARTIFACTS)) == len({kind_of(cls) for cls in ARTIFACTS})


def test_written_artifacts_start_with_kind_and_schema_version(run, profile, loop, calibration, record):
    for artifact in (run, profile, loop, calibration, record):
        data = json.loads(artifact.model_dump_json())
        assert list(data)[:2] == ["kind", "schema_version"], type(artifact).__name__
        assert artifact_kind(data) == type(artifact).model_fields["kind"].default


def test_times_are_utc_and_naive_ones_are_refused(run):
    assert run.started_utc.tzinfo is not None and run.started_utc.utcoffset() == timedelta(0)
    data = json.loads(run.model_dump_json())
    shifted = RunResult.model_validate({**data, "started_utc": "2026-12-01T06:25:21+02:00"})
    assert shifted.started_utc == datetime(2026, 12, 1, 4, 25, 21, tzinfo=timezone.utc)
    assert shifted.started_utc.utcoffset() == timedelta(0)
    with pytest.raises(ValueError, match="timezone"):
        RunResult.model_validate({**data, "started_utc": "2026-12-01T04:25:21"})


def test_artifacts_keep_the_file_names_they_always_had(run, calibration, record):
    for path in (LEGACY_RUN, LEGACY_PROFILE, LEGACY_LOOP, LEGACY_FIDELITY):
        assert load_artifact(path).file_name() == path.name
    assert load_result(LEGACY_RUN).stem() == LEGACY_RUN.name.removesuffix(".json")
    assert calibration.file_name() == LEGACY_DP_CACHE.name
    assert record.file_name() == f"{record.key}{MARKER_SUFFIX}"


def test_a_schema_1_0_result_still_loads_as_a_run():
    data = _legacy(LEGACY_RUN)
    assert data["schema_version"] == "1.0" and "kind" not in data  # a real file written before the header
    result = load_result(LEGACY_RUN)
    assert result.kind == "run" and result.schema_version == "1.0"
    assert result.model.name == "smolvla-tiny" and result.started_utc.tzinfo is not None
    assert artifact_kind(data) == "run"
    problems = validate_file(LEGACY_RUN, Requirements(min_iterations=1, min_duration_s=0, allow_dirty=True))
    assert {p.field for p in problems} == {"energy"}  # measured with --energy-meter none; the schema is fine


def test_artifacts_written_before_the_header_still_load():
    profile = load_artifact(LEGACY_PROFILE)
    loop = load_artifact(LEGACY_LOOP)
    fidelity = load_artifact(LEGACY_FIDELITY)
    assert (type(profile), type(loop), type(fidelity)) == (ProfileResult, LoopResult, FidelityReport)
    assert profile.finished_utc is None and profile.provenance is not None
    assert fidelity.model == "smolvla-tiny" and fidelity.provenance is None
    assert artifact_kind(_legacy(LEGACY_DP_CACHE)) == "dp-cache"  # a bare schedule: still no run
    with pytest.raises(InputError, match="bare schedule"):
        load_artifact(LEGACY_DP_CACHE)


def test_a_sweep_journal_entry_written_before_the_header_still_loads(record):
    old = json.loads(record.model_dump_json())
    for name in ("kind", "schema_version", "run_id", "started_utc", "model", "device", "backend", "precision"):
        del old[name]
    loaded = RunRecord.model_validate(old)
    assert loaded.run_id == record.key and loaded.kind == "sweep-run"
    assert loaded.started_utc == NOW - timedelta(seconds=3)  # finished_utc - wall_s
    assert (loaded.model, loaded.backend, loaded.precision) == ("smolvla-tiny", "torch", "fp32")


def test_load_result_refuses_other_kinds_and_unknown_schemas(run, profile, tmp_path):
    other = tmp_path / "profile.json"
    other.write_text(profile.model_dump_json())
    with pytest.raises(InputError, match=r"kind 'profile': a profile artifact, not a run"):
        load_result(other)
    data = json.loads(run.model_dump_json())
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**data, "schema_version": "2.0"}))
    with pytest.raises(
        InputError,
        match=r"schema_version '2.0' is not a supported run schema \('1.0', '1.1', '1.2', '1.3', '1.4', '1.5', '1.6'\)",
    ):
        load_result(future)
    kindless = tmp_path / "kindless.json"
    kindless.write_text(json.dumps({k: v for k, v in data.items() if k != "kind"}))
    with pytest.raises(InputError, match="kind missing"):
        load_result(kindless)


def _trace(path: Path) -> Path:
    trace = ChromeTrace(0, "t")
    trace.span("e2e", 0, 1_000_000, "phases")
    return trace.write(path)


@pytest.fixture
def mixed(tmp_path, run, profile, loop) -> Path:
    """A run result, a profile and a loop artifact and a foreign JSON file, with misleading names."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "whatever.json").write_text(run.model_dump_json(indent=2))
    # a profile named exactly as a run result would be
    (folder / run.file_name().replace(run.run_id[:8], "deadbeef")).write_text(profile.model_dump_json(indent=2))
    (folder / "cycles.json").write_text(loop.model_dump_json(indent=2))
    (folder / "foreign.json").write_text('{"hello": "world"}')
    return folder


def test_the_aggregate_reader_yields_exactly_the_run_result_whatever_the_names(mixed, run):
    loaded, skipped = load_results([mixed])
    assert [(path.name, result) for path, result in loaded] == [("whatever.json", run)]
    assert skipped == [f"{mixed / 'foreign.json'}: not a vlabench artifact (no kind)"]


def test_readers_pass_over_every_other_artifact_and_traces_quietly(mixed, run, calibration, record):
    shutil.copy(LEGACY_RUN, mixed / "old-run.json")
    for path in (LEGACY_PROFILE, LEGACY_LOOP, LEGACY_FIDELITY, LEGACY_DP_CACHE):
        shutil.copy(path, mixed / path.name)
    (mixed / "calibrated.json").write_text(calibration.model_dump_json())
    (mixed / "sweep-entry.json").write_text(record.model_dump_json())
    _trace(mixed / run.file_name())  # a Chrome trace named as a run result: no artifact, not foreign either
    _trace(mixed / "nested" / "profile.trace.json")
    journal = mixed / ".sweep"
    journal.mkdir()
    (journal / f"{record.key}{MARKER_SUFFIX}").write_text(record.model_dump_json())
    (mixed / ".partial-x.json").write_text(run.model_dump_json()[:100])  # a killed writer's temporary file
    loaded, skipped = load_results([mixed])
    assert sorted(path.name for path, _ in loaded) == ["old-run.json", "whatever.json"]
    assert {result.schema_version for _, result in loaded} == {"1.0", SCHEMA_VERSION}
    assert skipped == [f"{mixed / 'foreign.json'}: not a vlabench artifact (no kind)"]
    assert sorted(path.name for path in result_files(mixed)) == ["old-run.json", "whatever.json"]


def test_a_file_given_by_name_is_read_as_a_run_result_or_skipped_with_the_reason(mixed):
    profile = next(p for p in mixed.iterdir() if p.name.endswith("deadbeef.json"))
    loaded, skipped = load_results([mixed / "whatever.json", profile])
    assert [path.name for path, _ in loaded] == ["whatever.json"]
    assert len(skipped) == 1 and "a profile artifact, not a run" in skipped[0]


def test_unreadable_and_unsupported_results_are_skipped_with_the_reason(tmp_path, run):
    (tmp_path / "broken.json").write_text('{"kind": "run", "schema_version": ')
    (tmp_path / "ancient.json").write_text('{"schema_version": "0.1"}')
    (tmp_path / "future.json").write_text(run.model_copy(update={"schema_version": "9.9"}).model_dump_json())
    loaded, skipped = load_results([tmp_path])
    assert loaded == []
    assert [s.split(": ", 1)[0].rsplit("/", 1)[-1] for s in skipped] == ["ancient.json", "broken.json", "future.json"]
    assert "not valid JSON" in skipped[1]
    assert "schema_version '0.1' is not a supported run schema" in skipped[0]
    assert "schema_version '9.9' is not a supported run schema" in skipped[2]


def test_validate_checks_run_results_by_kind_with_sensible_messages(mixed, tmp_path):
    assert [path.name for path in result_files(mixed)] == ["whatever.json"]
    requirements = Requirements(min_iterations=1, min_duration_s=0, allow_dirty=True)
    profile = next(p for p in mixed.iterdir() if p.name.endswith("deadbeef.json"))
    [wrong_kind] = validate_file(profile, requirements)  # named explicitly: checked, and refused for its kind
    assert (wrong_kind.field, wrong_kind.message) == ("kind", "'profile': a profile artifact, not a run artifact")
    ancient = tmp_path / "old" / "ancient.json"
    ancient.parent.mkdir()
    ancient.write_text('{"schema_version": "0.1"}')
    (ancient.parent / "foreign.json").write_text("[1, 2]")
    assert result_files(ancient.parent) == [ancient]
    [schema] = validate_file(ancient, requirements)
    assert (
        schema.field == "schema_version"
        and schema.message == "'0.1' is not a supported run schema ('1.0', '1.1', '1.2', '1.3', '1.4', '1.5', '1.6')"
    )


def test_compare_matches_a_schema_1_0_baseline_with_a_current_candidate(tmp_path, run):
    baseline, candidate = tmp_path / "base", tmp_path / "cand"
    baseline.mkdir()
    shutil.copy(LEGACY_RUN, baseline / "anything.json")
    write_result(run, candidate)
    report = compare_folders(baseline, candidate, Settings(resamples=100))
    assert [match.config_hash for match in report.matches] == [run.config_hash]
    assert report.skipped == [] and report.only_baseline == report.only_candidate == []


def test_the_leaderboard_reads_runs_by_kind(mixed, tmp_path):
    from vlabench.leaderboard_site.build import build_site

    report = build_site([mixed], tmp_path / "site")
    assert report.runs == 1
    assert report.skipped == [f"{mixed / 'foreign.json'}: not a vlabench artifact (no kind)"]
