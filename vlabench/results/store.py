"""Finding and reading vlabench's JSON artifacts: what a file is comes from its ``kind``, never from its name."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import ValidationError

from vlabench.errors import InputError
from vlabench.results.header import RUN_KIND, ArtifactHeader, artifact_kind, is_chrome_trace

HEAD_BYTES = 4096
_FIRST_KEY = re.compile(rb'\A\s*\{\s*"(kind|traceEvents)"\s*:\s*(?:"([A-Za-z0-9_.-]*)")?')

SITE_MARKER = "vlabench-site.json"
"""The file ``vlabench site build`` leaves in a built site: the copies of results inside it are outputs, not inputs."""

A = TypeVar("A", bound=ArtifactHeader)


class UnreadableFile(InputError):
    """A file that cannot be read or is not JSON; ``reason`` says why without the path, ``field`` where (``<file>``:
    the file as a whole)."""

    def __init__(self, path: Path, reason: str, field: str = "<file>") -> None:
        super().__init__(f"{path}: {reason}" if field.startswith("<") else f"{path}: {field}: {reason}")
        self.reason, self.field = reason, field


MAX_JSON_BYTES = 64 * 2**20
"""A result is ~20 kB and a profile artifact well under a MB: a larger JSON document is not one to parse."""
MAX_DEPTH = 32
"""vlabench's artifacts nest 6 levels deep; deeper documents are refused before they reach a recursive reader."""
MAX_INTEGER = 2**63 - 1
"""Counts and byte sizes are 64-bit: a larger integer is no measurement (and overflows a float on the way)."""
_NOT_REGULAR = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@contextmanager
def open_regular(path: Path, follow_links: bool = True) -> Iterator[BinaryIO]:
    """``path`` opened for reading when it is a regular file, else UnreadableFile: a FIFO or device is refused
    without blocking (the open is non-blocking, the type read from the open file), and with ``follow_links=False``
    a symbolic link is refused rather than followed (files found inside an input folder: a link may point anywhere
    on the host)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise UnreadableFile(path, "a symbolic link: links inside an input folder are not followed") from None
        raise UnreadableFile(path, f"cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        kind = next((name for test, name in _NOT_REGULAR if test(mode)), None if stat.S_ISREG(mode) else "special")
        if kind is not None:
            raise UnreadableFile(path, f"not a regular file ({kind})")
        yield handle


def read_text(path: Path, follow_links: bool = True, limit: int = MAX_JSON_BYTES) -> str:
    """A regular file's text (``open_regular``): at most ``limit`` bytes of strict UTF-8, else UnreadableFile."""
    try:
        with open_regular(path, follow_links) as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise UnreadableFile(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UnreadableFile(path, f"too large: over {limit // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def copy_regular(source: Path, target: Path, follow_links: bool = False) -> None:
    """Copy a regular file that is no link (``open_regular``) to ``target``; UnreadableFile otherwise."""
    try:
        with open_regular(source, follow_links) as handle, target.open("wb") as out:
            shutil.copyfileobj(handle, out)
    except OSError as exc:
        raise UnreadableFile(source, f"cannot read: {exc.strerror or exc}") from None


def parse_json(path: Path, text: str) -> Any:
    """A JSON document no deeper than MAX_DEPTH whose integers fit in 64 bits; else UnreadableFile."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise UnreadableFile(path, f"not valid JSON: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more than 4300 digits
        raise UnreadableFile(path, f"not valid JSON: {exc}") from None
    problem = shape_problem(data)
    if problem is not None:
        raise UnreadableFile(path, problem[1], problem[0])
    return data


def shape_problem(data: Any) -> tuple[str, str] | None:
    """(field, message) for the first value nested deeper than MAX_DEPTH or integer beyond 64 bits, else None."""

    def too_large(value: Any) -> bool:
        return type(value) is int and not -MAX_INTEGER <= value <= MAX_INTEGER

    def message(value: int) -> str:
        return f"integer of {len(str(abs(value)))} digits: beyond 64 bits, no count or size is that large"

    if too_large(data):
        return "<root>", message(data)
    pending: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while pending:
        value, where = pending.pop()
        if len(where) >= MAX_DEPTH:
            return "<file>", f"not valid JSON: nested more than {MAX_DEPTH} levels deep"
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            if isinstance(item, (dict, list)):
                pending.append((item, (*where, str(key))))
            elif too_large(item):
                return ".".join((*where, str(key))), message(item)
    return None


def read_json(path: Path, follow_links: bool = True) -> Any:
    """A JSON document from a regular file (``read_text``, ``parse_json``); every failure is an UnreadableFile."""
    return parse_json(path, read_text(path, follow_links))


def json_files(root: Path) -> list[Path]:
    """``root`` itself when it is not a folder, else every ``*.json`` below it except hidden files and folders (the
    ``.partial-*`` temporaries of atomic writes, the ``.sweep/`` journal of a sweep) and built sites below it (a
    folder holding ``SITE_MARKER``: a site built inside a results folder holds copies of its results). Links to
    folders are not descended; links, FIFOs and devices named ``*.json`` are listed, so that readers report why they
    skip them."""
    if not os.path.lexists(root):
        raise InputError(f"{root}: no such file or folder")
    if not root.is_dir():
        return [root]
    found = []
    for folder, folders, files in os.walk(root, followlinks=False):
        folders[:] = [
            name for name in folders if not name.startswith(".") and not (Path(folder, name) / SITE_MARKER).is_file()
        ]
        found.extend(Path(folder, name) for name in files if name.endswith(".json") and not name.startswith("."))
    return sorted(found)


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
    """("kind", value) or ("traceEvents", None) when the document starts with that key, else None (also when the
    file cannot be read: the full read says why). Links are never followed here: only folder walks survey."""
    try:
        with open_regular(path, follow_links=False) as handle:
            match = _FIRST_KEY.match(handle.read(HEAD_BYTES))
    except (OSError, UnreadableFile):
        return None
    if match is None:
        return None
    key, value = match.group(1).decode(), match.group(2)
    if key == "kind":
        return None if value is None else (key, value.decode())
    return key, None


def survey(path: Path, parse_kind: str = RUN_KIND) -> Surveyed:
    """The kind of ``path``, a file found in a folder (a link is not followed but reported); the document is parsed
    when its kind is ``parse_kind`` or cannot be told from the first bytes (every artifact writes ``kind`` first)."""
    head = _head_kind(path)
    if head == ("traceEvents", None):
        return Surveyed(path, chrome_trace=True)
    if head is not None and head[1] != parse_kind:
        return Surveyed(path, kind=head[1])
    try:
        data = read_json(path, follow_links=False)
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
