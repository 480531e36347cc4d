"""User-facing errors. Each carries the process exit code documented in the README."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class VlabenchError(Exception):
    """An error the CLI reports as one clear message (no traceback)."""

    exit_code = 1


class InputError(VlabenchError):
    """Bad input: an unknown name, an invalid option value, a malformed spec, profile or results file."""

    exit_code = 2


class UnavailableError(VlabenchError):
    """The requested hardware, runtime or sensor is not present or not accessible on this host."""

    exit_code = 3


class InsufficientMemoryError(VlabenchError):
    """The model would not fit in the target's available memory; refused before allocation."""

    exit_code = 4


def unknown_name(kind: str, name: str, valid: Iterable[str]) -> InputError:
    """An InputError listing the valid names and suggesting the closest one."""
    choices = sorted(valid)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return InputError(f"Unknown {kind} '{name}'.{hint} Valid {kind}s: {', '.join(choices)}.")
