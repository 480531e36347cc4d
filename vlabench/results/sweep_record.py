"""The sweep's artifact: one journal entry per run (``<out>/.sweep/<key>.sweep.json``), written from the run's
``LaunchOutcome`` (``launch_outcome.py``) by ``fleet/local_runner.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar, Literal

from pydantic import AwareDatetime, Field, TypeAdapter, ValidationError, model_validator

from vlabench.results.header import ArtifactHeader

MARKER_SUFFIX = ".sweep.json"
SWEEP_RUN_KIND = "sweep-run"
SWEEP_RUN_SCHEMA_VERSION = "1.0"
"""1.0: the artifact header (journal entries of before had no kind, schema_version, run_id or started_utc)."""

Status = Literal["ok", "invalid", "failed", "skipped"]


class RunRecord(ArtifactHeader):
    """The journal entry of one run, written atomically into ``<out>/.sweep/<key>.sweep.json``: the sweep's
    artifact (one per run). Its header's model/device/backend/precision are the run's settings as requested."""

    kind: Literal["sweep-run"] = SWEEP_RUN_KIND
    schema_version: str = SWEEP_RUN_SCHEMA_VERSION
    run_id: str = Field(description="the run's key")
    started_utc: AwareDatetime
    finished_utc: AwareDatetime
    model: str | None = None
    device: str | None = None
    key: str
    label: str
    status: Status
    result: str | None = None
    reason: str | None = None
    exit_code: int | None = None
    wall_s: float | None = None
    e2e_p50_ms: float | None = None
    placement: str | None = None
    hostname: str | None = None
    node_id: str | None = None
    config: dict[str, Any]

    FILE_SUFFIX: ClassVar[str] = MARKER_SUFFIX

    @model_validator(mode="before")
    @classmethod
    def _header_from_entry(cls, data: Any) -> Any:
        """The header's id and settings come from the entry itself (also for entries written before the header;
        those get ``finished_utc - wall_s`` as their start)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data.setdefault("run_id", data.get("key"))
        config = data.get("config")
        if isinstance(config, dict):
            for name in ("model", "device", "backend", "precision"):
                data.setdefault(name, config.get(name))
        if "started_utc" not in data and data.get("finished_utc") is not None:
            try:
                finished = TypeAdapter(AwareDatetime).validate_python(data["finished_utc"])
                data["started_utc"] = finished - timedelta(seconds=float(data.get("wall_s") or 0.0))
            except (ValidationError, TypeError, ValueError):
                pass  # the missing start is reported by validation
        return data

    def stem(self) -> str:
        return self.key
