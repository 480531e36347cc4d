"""The header every vlabench JSON artifact starts with, and how a parsed document says which artifact it is.

Each artifact (a run result, a profile, a control loop, a fidelity report, a DP-Cache calibration, a sweep journal
entry) is a subclass of ``ArtifactHeader`` that fixes its ``kind`` (a one-value ``Literal``) and its current
``schema_version``; ``results.artifacts`` lists them all. Readers pick artifacts by ``kind``, never by file name:
see ``results.store``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar, NamedTuple

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from vlabench.results.provenance import Provenance

RUN_KIND = "run"
LEGACY_RUN_SCHEMA = "1.0"
"""Run results written before artifacts had a ``kind`` carry only ``schema_version: "1.0"``."""


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class DocumentProblem(NamedTuple):
    """Why a parsed document is not an artifact a class reads: the field at fault and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        return self.message if self.field.startswith("<") else f"{self.field} {self.message}"


class Stored(BaseModel):
    """A block of an artifact: non-finite floats are written as "NaN"/"Infinity" strings and read back as floats
    (pydantic's default writes null, which loses the value and no longer loads)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")


class ArtifactHeader(BaseModel):
    """Fields shared by every artifact; subclasses narrow ``kind`` to a ``Literal`` and give ``schema_version`` a
    default (and may narrow ``model``/``device`` or make a field required).

    Non-finite floats are written as the strings "NaN", "Infinity" and "-Infinity" (pydantic reads them back as
    floats; JSON has no NaN, and pydantic's default, null, would lose the value and fail to load)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    kind: str = Field(description="which artifact this is; readers select on it")
    schema_version: str = Field(description="version of this kind's schema")
    run_id: str = Field(description="this artifact's id (a uuid4 hex; a sweep journal entry: the run's key)")
    started_utc: AwareDatetime
    finished_utc: AwareDatetime | None = Field(default=None, description="None: not recorded (older artifacts)")
    model: Any = Field(default=None, description="the model name (a run result: its ModelInfo); None: not one model")
    device: Any = Field(default=None, description="the device profile (a run result: its DeviceInfo)")
    backend: str | None = None
    precision: str | None = None
    provenance: Provenance | None = Field(default=None, description="None: not collected by this artifact")

    FILE_SUFFIX: ClassVar[str] = ".json"
    """What ``file_name`` appends to ``stem()``; names are for people, readers never rely on them."""
    READABLE_SCHEMAS: ClassVar[tuple[str, ...] | None] = None
    """The schema versions this class reads; None: any (also artifacts written before they had one)."""

    @field_validator("started_utc", "finished_utc")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(timezone.utc)

    @classmethod
    def document_problem(cls, data: Any) -> DocumentProblem | None:
        """Why a parsed JSON document is not an artifact of this class's kind and a readable schema, or None."""
        expected = cls.model_fields["kind"].default
        if not isinstance(data, dict):
            return DocumentProblem("<file>", "not a JSON object")
        kind = artifact_kind(data)
        if kind is None and "schema_version" not in data:
            return DocumentProblem("kind", "missing: not a vlabench artifact")
        if kind is not None and kind != expected:
            return DocumentProblem("kind", f"{kind!r}: a {kind} artifact, not a {expected} artifact")
        version = data.get("schema_version")
        if cls.READABLE_SCHEMAS is not None and version not in cls.READABLE_SCHEMAS:
            readable = ", ".join(map(repr, cls.READABLE_SCHEMAS))
            return DocumentProblem("schema_version", f"{version!r} is not a supported {expected} schema ({readable})")
        if kind is None:
            return DocumentProblem("kind", f"missing (schema {version} {expected} artifacts carry kind {expected!r})")
        return None

    def stem(self) -> str:
        """The file name without ``FILE_SUFFIX`` (each artifact keeps the naming it always had)."""
        raise NotImplementedError

    def file_name(self) -> str:
        return self.stem() + self.FILE_SUFFIX

    @staticmethod
    def stamp(moment: datetime) -> str:
        """The UTC timestamp that starts most artifact names."""
        return moment.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class MeasuredArtifact(ArtifactHeader):
    """The header of an artifact that measured one model on one target: every identity field is required."""

    run_id: str
    started_utc: AwareDatetime
    model: str
    device: str
    backend: str
    precision: str
    provenance: Provenance


def artifact_kind(data: Any) -> str | None:
    """The kind of a parsed JSON document: its ``kind``; for files written before artifacts had one, ``run`` for
    schema-1.0 run results, ``dp-cache`` for calibrated DP-Cache schedules and ``sweep-run`` for sweep journal
    entries. None: not a vlabench artifact (foreign JSON, a Chrome trace)."""
    if not isinstance(data, dict):
        return None
    kind = data.get("kind")
    if "kind" in data:
        return kind if isinstance(kind, str) else None
    if "schema_version" in data:
        return RUN_KIND if data["schema_version"] == LEGACY_RUN_SCHEMA else None
    if {"steps", "computed", "calibration"} <= data.keys():
        return "dp-cache"
    if {"key", "status", "config", "finished_utc"} <= data.keys():
        return "sweep-run"
    return None


def is_chrome_trace(data: Any) -> bool:
    """A Chrome/Perfetto trace (``vlabench profile`` writes one beside its artifact): not an artifact itself."""
    return isinstance(data, dict) and "traceEvents" in data and "kind" not in data
