"""The two consoles every command prints to, and the raw JSON output of ``--json``."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

from pydantic import BaseModel
from rich.console import Console, ConsoleDimensions, RenderableType
from rich.markup import escape
from rich.text import Text

WIDE = 160  # tables keep their columns when output goes to a file or pipe
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but newline (a tab too: it breaks table cells), DEL, C1 controls (CSI, OSC, ...), bidirectional marks
and overrides."""


def printable(text: object) -> str:
    """``text`` with every control character shown as its escape (ESC as ``\\x1b``): a string from a result file,
    a path or an option cannot move the cursor, recolour or retitle the terminal, or hide what follows it."""
    return _CONTROL.sub(lambda found: ascii(found[0])[1:-1], str(text))


def safe(text: object, style: str = "") -> Text:
    """Data for the terminal (a table cell, a message): control characters escaped (``printable``), Rich markup
    shown as typed (``[/oops]`` is text, never a tag)."""
    return Text(printable(text), style=style)


def markup_safe(text: object) -> str:
    """Data to put inside a Rich markup string (``f"result: [bold]{markup_safe(path)}[/]"``): printable, with every
    bracket escaped so a path or a name can never close or open a tag."""
    return escape(printable(text))


class Terminal(Console):
    """A console as wide as ``$COLUMNS`` when it is set, else as the terminal, else (a file or pipe) WIDE columns.

    The width is read at each print, not when the console is made, so ``COLUMNS=80 vlabench models | less`` (and a
    test that sets COLUMNS while invoking a command) lays the tables out for 80 columns."""

    @property
    def size(self) -> ConsoleDimensions:
        measured = super().size
        columns = self._environ.get("COLUMNS", "")
        if columns.isdigit():
            return ConsoleDimensions(int(columns), measured.height)
        return measured if self.is_terminal else ConsoleDimensions(WIDE, measured.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


stdout = Terminal()
stderr = Terminal(stderr=True)


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
        notes(as_json).print(line, soft_wrap=True)  # a path is never broken: the terminal wraps it, copyable


def warn_skipped(problems: list[str]) -> None:
    """One yellow line per input passed over (unreadable, not a result, …); its path is never broken."""
    for problem in problems:
        stderr.print(Text.assemble(("skipped", "yellow"), " ", safe(problem)), highlight=False, soft_wrap=True)
