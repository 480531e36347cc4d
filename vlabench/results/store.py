"""Finding and reading vlabench's JSON artifacts: what a file is comes from its ``kind``, never from its name."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from vlabench.errors import InputError
from vlabench.results.header import RUN_KIND, ArtifactHeader, artifact_kind, artifact_types, is_chrome_trace

HEAD_BYTES = 4096
_FIRST_KEY = re.compile(rb'\A\s*\{\s*"(kind|traceEvents)"\s*:\s*(?:"([A-Za-z0-9_.-]*)")?')

A = TypeVar("A", bound=ArtifactHeader)


class UnreadableFile(InputError):
    """A file that cannot be read or is not JSON; ``reason`` says why without the path."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.reason = reason


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableFile(path, f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UnreadableFile(path, f"not valid JSON: {exc}") from None


def json_files(root: Path) -> list[Path]:
    """``root`` itself when it is a file, else every ``*.json`` below it except hidden files and folders (the
    ``.partial-*`` temporaries of atomic writes, the ``.sweep/`` journal of a sweep)."""
    if not root.exists():
        raise InputError(f"{root}: no such file or folder")
    if root.is_file():
        return [root]
    return sorted(
        path
        for path in root.rglob("*.json")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )


@dataclass(frozen=True)
class Surveyed:
    """What one JSON file is. ``data`` is the parsed document, unless the kind was read from the file's first bytes
    (a kind other than the one asked for, a Chrome trace: large files are not parsed for nothing)."""

    path: Path
    kind: str | None = None
    data: Any = None
    error: UnreadableFile | None = None
    chrome_trace: bool = False

    @property
    def foreign(self) -> bool:
        """Readable JSON that is no vlabench artifact (and no Chrome trace), nor claims a run schema."""
        return self.error is None and self.kind is None and not self.chrome_trace and not self.claims_run

    @property
    def claims_run(self) -> bool:
        """A run result, or a document with a ``schema_version`` but no kind (a run schema this version cannot
        read, such as 0.x): readers report why they skip it."""
        unkinded = self.kind is None and isinstance(self.data, dict) and "schema_version" in self.data
        return self.error is None and (self.kind == RUN_KIND or unkinded)


def _head_kind(path: Path) -> tuple[str, str | None] | None:
    """("kind", value) or ("traceEvents", None) when the document starts with that key, else None."""
    try:
        with path.open("rb") as handle:
            match = _FIRST_KEY.match(handle.read(HEAD_BYTES))
    except OSError:
        return None
    if match is None:
        return None
    key, value = match.group(1).decode(), match.group(2)
    if key == "kind":
        return None if value is None else (key, value.decode())
    return key, None


def survey(path: Path, parse_kind: str = RUN_KIND) -> Surveyed:
    """The kind of ``path``; the document is parsed when its kind is ``parse_kind`` or cannot be told from the first
    bytes (every artifact writes ``kind`` first)."""
    head = _head_kind(path)
    if head == ("traceEvents", None):
        return Surveyed(path, chrome_trace=True)
    if head is not None and head[1] != parse_kind:
        return Surveyed(path, kind=head[1])
    try:
        data = read_json(path)
    except UnreadableFile as exc:
        return Surveyed(path, error=exc)
    return Surveyed(path, kind=artifact_kind(data), data=data, chrome_trace=is_chrome_trace(data))


def survey_tree(roots: list[Path], parse_kind: str = RUN_KIND) -> list[Surveyed]:
    return [survey(path, parse_kind) for root in roots for path in json_files(root)]


def validate_artifact(path: Path, data: Any, model: type[A], label: str | None = None) -> A:
    """``data`` as ``model``; a validation error becomes an InputError naming the file and the first field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "<root>"
        what = label or f"{model.model_fields['kind'].default} artifact"
        raise InputError(f"{path}: invalid {what} at {where}: {first['msg']}") from None


def load_artifact(path: Path) -> ArtifactHeader:
    """Any artifact, as the class of its kind (that class's module must be imported); its schema version must be
    one the class reads (``READABLE_SCHEMAS``). Run results: ``schema.load_result`` returns a typed ``RunResult``."""
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
