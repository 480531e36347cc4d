"""Every artifact vlabench writes, in one place: which class reads which ``kind``, whatever else is imported.

Add a new artifact class (an ``ArtifactHeader`` subclass with its own one-value ``kind``) to ``ARTIFACTS``;
``tests/unit/results/test_artifacts.py`` fails for one defined anywhere in the package and missing here."""

from __future__ import annotations

from pathlib import Path

from vlabench.errors import InputError
from vlabench.results.calibration import DPCacheCalibration
from vlabench.results.fidelity_artifact import FidelityReport
from vlabench.results.header import ArtifactHeader, artifact_kind
from vlabench.results.loop_artifact import LoopResult
from vlabench.results.profile_artifact import ProfileResult
from vlabench.results.schema import RunResult
from vlabench.results.store import read_json, validate_artifact
from vlabench.results.sweep_record import RunRecord

ARTIFACTS: tuple[type[ArtifactHeader], ...] = (
    RunResult,
    ProfileResult,
    LoopResult,
    FidelityReport,
    DPCacheCalibration,
    RunRecord,
)


def kind_of(cls: type[ArtifactHeader]) -> str:
    """The ``kind`` an artifact class writes (the default of its one-value ``Literal``)."""
    return cls.model_fields["kind"].default


def artifact_types() -> dict[str, type[ArtifactHeader]]:
    """Every artifact class by its kind."""
    return {kind_of(cls): cls for cls in ARTIFACTS}


def load_artifact(path: Path) -> ArtifactHeader:
    """Any artifact, as the class of its kind; its schema version must be one the class reads
    (``READABLE_SCHEMAS``). Run results: ``schema.load_result`` returns a typed ``RunResult``."""
    data = read_json(path)
    kind = artifact_kind(data)
    if kind is None:
        raise InputError(f"{path}: not a vlabench artifact (no kind)")
    model = artifact_types().get(kind)
    if model is None:
        raise InputError(f"{path}: unknown artifact kind {kind!r}")
    problem = model.document_problem(data)
    if problem is not None:
        raise InputError(f"{path}: {problem}")
    return validate_artifact(path, {**data, "kind": kind}, model)
