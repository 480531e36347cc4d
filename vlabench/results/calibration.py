"""The artifact ``vlabench calibrate dp-cache`` writes: the calibrated DP-Cache schedule under the artifact header.

The schedule (with what the calibration measured in its ``calibration`` field) is nested under ``schedule``, so
``--dp-cache FILE`` reads it from there; files written before the header hold the bare schedule."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import AwareDatetime, Field

from vlabench.atomic import atomic_write_text
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.results.header import ArtifactHeader, DocumentProblem

CALIBRATION_KIND = "dp-cache"
CALIBRATION_SCHEMA_VERSION = "1.0"


class DPCacheCalibration(ArtifactHeader):
    """``<model>.dp-cache.json`` (the default name; ``--out`` may choose any)."""

    kind: Literal["dp-cache"] = CALIBRATION_KIND
    schema_version: str = CALIBRATION_SCHEMA_VERSION
    run_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    started_utc: AwareDatetime
    model: str
    device: str | None = Field(default="cpu", description="the device profile the candidate actions ran on")
    backend: str | None = "torch"
    precision: str | None = "fp32"
    schedule: DPCacheSchedule

    FILE_SUFFIX: ClassVar[str] = ".dp-cache.json"

    @classmethod
    def document_problem(cls, data: Any) -> DocumentProblem | None:
        if isinstance(data, dict) and "kind" not in data and {"steps", "computed"} <= data.keys():
            return DocumentProblem("kind", "missing: a bare schedule written before the artifact header")
        return super().document_problem(data)

    def stem(self) -> str:
        return self.model


def write_calibration(artifact: DPCacheCalibration, path: Path | None = None) -> Path:
    """Write atomically to ``path`` (default: ``results/<model>.dp-cache.json``)."""
    return atomic_write_text(path or Path("results") / artifact.file_name(), artifact.model_dump_json(indent=2))
