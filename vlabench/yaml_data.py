"""Schema-validated YAML: packaged profiles and user config files, with errors that name the file and field; and the
one guarded reader of the text files a user names (configs, sweep files, power logs, results).

:func:`read_text_file` opens only regular files (a FIFO, a directory or a device such as ``/dev/zero`` behind a
symlink is refused at once, never read), reads at most :data:`MAX_TEXT_BYTES` and decodes strict UTF-8; every problem
is one InputError naming the file. :func:`parse_yaml` refuses duplicate mapping keys (naming the key and both lines)
and reads ``1e3`` as a number, as YAML 1.2 does."""

from __future__ import annotations

import errno
import os
import re
import stat
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from vlabench.errors import InputError

Model = TypeVar("Model", bound=BaseModel)

MAX_TEXT_BYTES = 64 * 1024 * 1024
"""The largest text file vlabench reads (configs, sweep files, power logs, results): 64 MiB."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_text_file(path: str | Path, what: str = "file", max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``; anything else is an InputError naming ``path`` and ``what``.

    The file is opened non-blocking (a FIFO without a writer does not hang the open), checked to be a regular file
    before a byte is read, read up to ``max_bytes`` (a file that is larger, or grows past it, is refused) and decoded
    as strict UTF-8 without NUL bytes (a binary file is refused, not half-read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket or a FIFO opened for writing only
            raise InputError(f"{path}: the {what} is not a regular file") from None
        raise InputError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise InputError(f"{path}: the {what} is {kind}, not a regular file")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise InputError(f"{path}: the {what} is over {max_bytes // (1024 * 1024)} MiB; is it the right file?")
    data = b"".join(chunks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: the {what} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); "
            "is it a binary file?"
        ) from None
    if "\0" in text:
        raise InputError(f"{path}: the {what} contains NUL bytes at offset {text.index(chr(0))}; is it a binary file?")
    return text


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that sets the same key twice (YAML says keys are unique; PyYAML would keep the last silently)."""

    def __init__(self, key: Any, line: int, first_line: int) -> None:
        self.problem = f"duplicate key {key!r} (first set on line {first_line})"
        self.line = line
        super().__init__(f"line {line}: {self.problem}")


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate mapping keys and resolves YAML 1.2 floats (``1e3``, not a string)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` then a key of base is an override, not a duplicate
            key, line = self.construct_object(key_node, deep=False), key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class raises its own error
                continue
            if first is not None:
                raise DuplicateKeyError(key, line, first)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


MAX_DEPTH = 32
"""vlabench's YAML files nest a few levels; a deeper document is refused before PyYAML's recursive composer."""
MAX_NODES = 100_000
"""Values a document may hold with its aliases expanded (a "billion laughs" of nested aliases is refused)."""


class ShapeError(yaml.YAMLError):
    """A document nested too deeply, or too large once its aliases are expanded."""

    def __init__(self, problem: str, line: int) -> None:
        self.problem, self.line = problem, line
        super().__init__(f"line {line}: {problem}")


def check_shape(text: str) -> None:
    """Walk the parser's events (an iterative state machine, no recursion) and refuse a document nested more than
    ``MAX_DEPTH`` levels or holding more than ``MAX_NODES`` values with its aliases expanded (ShapeError)."""
    sizes: dict[str, int] = {}
    open_nodes: list[tuple[str | None, int]] = []  # (anchor, values so far) of each open mapping or sequence
    total = 0
    for event in yaml.parse(text, Loader=StrictLoader):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append((event.anchor, 0))
            if len(open_nodes) > MAX_DEPTH:
                raise ShapeError(f"nested more than {MAX_DEPTH} levels deep", line)
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = open_nodes.pop()
            size += 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, size = None, sizes.get(event.anchor, 1)
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        if open_nodes:
            open_nodes[-1] = (open_nodes[-1][0], open_nodes[-1][1] + size)
        total += size if isinstance(event, yaml.AliasEvent) else 1
        if total > MAX_NODES:
            raise ShapeError(f"more than {MAX_NODES} values with its aliases expanded", line)


def load_yaml(text: str) -> Any:
    """``text`` parsed by :class:`StrictLoader` once its shape is checked (``check_shape``); raises
    ``yaml.YAMLError`` (a DuplicateKeyError or ShapeError included)."""
    check_shape(text)
    return yaml.load(text, Loader=StrictLoader)  # a SafeLoader: no arbitrary objects


def describe_validation(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())


def parse_yaml(text: str, schema: type[Model] | TypeAdapter, origin: str, what: str, empty_ok: bool = False) -> Model:
    """``text`` validated against ``schema`` (a model or a TypeAdapter over a union); malformed YAML, a duplicate key
    or invalid fields raise InputError naming ``origin``."""
    try:
        data = load_yaml(text)
    except (DuplicateKeyError, ShapeError) as exc:
        raise InputError(f"{origin}:{exc.line}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{origin}: malformed YAML: {exc}") from None
    try:
        data = {} if data is None and empty_ok else data
        if isinstance(schema, TypeAdapter):
            return schema.validate_python(data)
        return schema.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{origin}: invalid {what}: {describe_validation(exc)}") from None


def load_yaml_file(path: Path, schema: type[Model] | TypeAdapter, what: str, empty_ok: bool = False) -> Model:
    """A user's YAML file, read by :func:`read_text_file` and validated by :func:`parse_yaml`."""
    return parse_yaml(read_text_file(path, what), schema, str(path), what, empty_ok=empty_ok)


USER_PROFILES = "VLABENCH_PROFILES"
"""A folder laid out like ``profiles/`` (``models/``, ``devices/``) whose YAML files join those shipped with
vlabench: a model or device of one's own without editing the installed package (a name there shadows a shipped one)."""


def _user_folder(folder: str) -> Path | None:
    root = os.environ.get(USER_PROFILES)
    return Path(root) / folder if root and (Path(root) / folder).is_dir() else None


def packaged_names(folder: str) -> list[str]:
    """Names of the ``profiles/<folder>/*.yaml`` files shipped with vlabench and in ``$VLABENCH_PROFILES/<folder>``."""
    roots = [resources.files("vlabench.profiles").joinpath(folder), _user_folder(folder)]
    return sorted(
        {p.name.removesuffix(".yaml") for root in roots if root for p in root.iterdir() if p.name.endswith(".yaml")}
    )


def load_packaged(folder: str, name: str, schema: type[Model] | TypeAdapter, what: str) -> Model:
    user = _user_folder(folder)
    if user is not None and (user / f"{name}.yaml").is_file():
        return load_yaml_file(user / f"{name}.yaml", schema, what)
    text = resources.files("vlabench.profiles").joinpath(folder, f"{name}.yaml").read_text()
    return parse_yaml(text, schema, f"profiles/{folder}/{name}.yaml", what)
