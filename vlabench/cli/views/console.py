"""The two consoles every command prints to, and the raw JSON output of ``--json``."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from pydantic import BaseModel
from rich.console import Console, RenderableType

WIDE = 160  # tables keep their columns when output goes to a file or pipe
stdout = Console(width=None if sys.stdout.isatty() else WIDE)
stderr = Console(stderr=True, width=None if sys.stderr.isatty() else WIDE)


def notes(as_json: bool) -> Console:
    """Where the lines around a result go: stdout, or stderr when stdout carries the JSON."""
    return stderr if as_json else stdout


def write_json(text: str) -> None:
    """JSON on stdout as it is (no markup, no wrapping)."""
    sys.stdout.write(text + "\n")


def show(as_json: bool, document: BaseModel, renderables: Iterable[RenderableType], *files: str) -> None:
    """A command's outcome on stdout: the document as JSON with ``--json``, else its renderables; then a line per
    file it wrote, where the notes go."""
    if as_json:
        write_json(document.model_dump_json(indent=2))
    else:
        for renderable in renderables:
            stdout.print(renderable)
    for line in files:
        notes(as_json).print(line)


def warn_skipped(problems: list[str]) -> None:
    """One yellow line per input passed over (unreadable, not a result, …)."""
    for problem in problems:
        stderr.print(f"[yellow]skipped[/] {problem}", highlight=False)
