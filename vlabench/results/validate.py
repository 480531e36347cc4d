"""``vlabench validate``: is every result in a folder fit for publication? Lists each problem with file and field."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ValidationError

from vlabench.backends import BACKENDS
from vlabench.measure.correctness import needs_reference
from vlabench.results.artifacts import artifact_types
from vlabench.results.header import RUN_KIND
from vlabench.results.schema import RunResult
from vlabench.results.store import UnreadableFile, json_files, read_json, survey
from vlabench.telemetry.energy.select import label_of_method


class Requirements(BaseModel):
    min_iterations: int = 10
    min_duration_s: float = 10.0
    allow_dirty: bool = False
    require_measured_energy: bool = False


class Problem(BaseModel):
    file: str
    field: str
    message: str


def survey_folder(root: Path) -> tuple[list[Path], list[Problem]]:
    """``root`` when it is a file; else the JSON files below it that are run results (by ``kind``, whatever their
    names), claim a run schema version, or cannot be read, and a problem for each file that is no vlabench artifact
    (foreign JSON, an unknown kind): a folder to publish holds vlabench's results, its other artifacts and their
    Chrome traces, nothing that would pass unchecked."""
    if not root.is_dir():
        return [root], []
    known = artifact_types()
    surveyed = [survey(path, RUN_KIND) for path in json_files(root)]
    files = [found.path for found in surveyed if found.error is not None or found.claims_run]
    strangers = [
        Problem(
            file=str(found.path),
            field="<file>" if found.kind is None else "kind",
            message=(
                "not a vlabench artifact: no kind, no run schema, no Chrome trace"
                if found.kind is None
                else f"not a vlabench artifact: unknown kind {found.kind!r} (known: {', '.join(known)})"
            ),
        )
        for found in surveyed
        if found.foreign or (found.kind is not None and found.kind not in known)
    ]
    return files, strangers


def result_files(root: Path) -> list[Path]:
    """The run result files of ``root`` (``survey_folder``)."""
    return survey_folder(root)[0]


def validate_folder(root: Path, requirements: Requirements) -> tuple[list[Path], list[Problem]]:
    """The result files found and every problem in them and beside them (a link inside a folder is a problem, never
    followed; so is a JSON file that is no vlabench artifact)."""
    files, strangers = survey_folder(root)
    named = not root.is_dir()
    problems = [problem for path in files for problem in validate_file(path, requirements, follow_links=named)]
    return files, problems + strangers


def validate_file(path: Path, requirements: Requirements, follow_links: bool = True) -> list[Problem]:
    def problem(field: str, message: str) -> Problem:
        return Problem(file=str(path), field=field, message=message)

    try:
        data = read_json(path, follow_links)
    except UnreadableFile as exc:
        return [problem(exc.field, exc.reason)]
    wrong = RunResult.document_problem(data)  # not a run result, or a run schema this version does not read
    if wrong is not None:
        return [problem(wrong.field, wrong.message)]
    try:
        result = RunResult.model_validate(data)
    except ValidationError as exc:
        return [problem(".".join(map(str, e["loc"])) or "<root>", e["msg"]) for e in exc.errors()]
    found = result.physical_problems() + publication_problems(result, requirements)
    return [problem(field, message) for field, message in found]


def publication_problems(result: RunResult, requirements: Requirements) -> list[tuple[str, str]]:
    found = []
    if result.status == "partial":
        found.append(("status", f"partial: {result.partial_reason} (kept, not fit for publication)"))
    provenance = result.provenance
    if not provenance.git_revision:
        found.append(("provenance.git_revision", "missing: the vlabench revision that measured this is unknown"))
    if provenance.git_dirty and not requirements.allow_dirty:
        found.append(("provenance.git_dirty", "measured from a modified working tree (--allow-dirty accepts it)"))
    for field in ("vlabench_version", "python", "os", "cpu_model"):
        if not getattr(provenance, field):
            found.append((f"provenance.{field}", "missing"))
    if "torch" not in provenance.libraries:
        found.append(("provenance.libraries", "the torch version is not recorded"))
    if not provenance.command_line:
        found.append(("provenance.command_line", "missing"))
    reason = result.invalid_reason
    if reason is not None and reason.startswith("mislabelled"):
        found.append(("execution", reason))
    elif result.correctness is None:
        backend = BACKENDS.get(result.backend)
        if needs_reference(backend is not None and backend.is_reference, result.precision):
            found.append(("correctness", f"{result.backend} {result.precision} has no correctness check"))
    elif reason is not None:
        field = "correctness.relative_error" if result.correctness.relative_error is None else "correctness.passed"
        found.append((field, reason))
    timing = result.timing
    if timing.iterations < requirements.min_iterations:
        found.append(("timing.iterations", f"{timing.iterations} < the required {requirements.min_iterations}"))
    if timing.timed_duration_s < requirements.min_duration_s:
        found.append(
            (
                "timing.timed_duration_s",
                f"{timing.timed_duration_s:.2f} s < the required {requirements.min_duration_s:g} s",
            )
        )
    energy = result.energy
    if energy is None:
        found.append(("energy", "no energy measurement (the run used --energy-meter none)"))
    else:
        if not energy.method or not energy.scope:
            found.append(("energy.method", "the sensor method and scope must be declared"))
        measured = energy.label == "measured" and label_of_method(energy.method) == "measured"
        if requirements.require_measured_energy and not measured:
            found.append(("energy.label", f"{energy.label} ({energy.method}), not measured by a known sensor"))
    return found
