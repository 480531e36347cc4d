"""The two consoles every command prints to, and the raw JSON output of ``--json``."""

from __future__ import annotations

import sys

from rich.console import Console

WIDE = 160  # tables keep their columns when output goes to a file or pipe
stdout = Console(width=None if sys.stdout.isatty() else WIDE)
stderr = Console(stderr=True, width=None if sys.stderr.isatty() else WIDE)


def notes(as_json: bool) -> Console:
    """Where the lines around a result go: stdout, or stderr when stdout carries the JSON."""
    return stderr if as_json else stdout


def write_json(text: str) -> None:
    """JSON on stdout as it is (no markup, no wrapping)."""
    sys.stdout.write(text + "\n")
