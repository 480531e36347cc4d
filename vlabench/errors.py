"""User-facing errors. Each carries the process exit code documented in the README."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class VlabenchError(Exception):
    """An error the CLI reports as one clear message (no traceback); an empty one when the command has already shown
    what went wrong (a table of problems, an INVALID verdict)."""

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


class InvalidResultError(VlabenchError):
    """A run completed but its result is invalid (it failed the correctness gate): written, marked, never ranked."""

    exit_code = 5


class CheckFailedError(VlabenchError):
    """A check failed: ``compare`` found a regression (latency, energy or correctness), or ``validate`` a problem."""

    exit_code = 6


class SweepFailedError(VlabenchError):
    """At least one run of a sweep failed (crash, timeout, error); the others completed, a rerun retries it."""

    exit_code = 7


class ServerRefusedError(UnavailableError):
    """``run --remote``: nothing accepts connections at the address (connection refused) within the wait."""

    exit_code = 10


class ServerUnreachableError(UnavailableError):
    """``run --remote``: no route to the host, or it never answered the connection."""

    exit_code = 11


class NameNotResolvedError(UnavailableError):
    """``run --remote``: the host name does not resolve to an address."""

    exit_code = 12


class ServerTimeoutError(UnavailableError):
    """``run --remote``: the server did not finish starting, or did not answer a request, in time."""

    exit_code = 13


class ServerShuttingDownError(UnavailableError):
    """``run --remote``: the server said it is shutting down (a partial result keeps what was served)."""

    exit_code = 14


class ServerLostError(UnavailableError):
    """``run --remote``: the connection to the server dropped mid-run (killed, crashed; a partial result keeps what
    was served)."""

    exit_code = 15


class InterruptError(VlabenchError):
    """Interrupted (Ctrl-C) before the command finished; no result is written, except a served run's partial one."""

    exit_code = 130


def unknown_name(kind: str, name: str, valid: Iterable[str]) -> InputError:
    """An InputError listing the valid names and suggesting the closest one."""
    choices = sorted(valid)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return InputError(f"Unknown {kind} '{name}'.{hint} Valid {kind}s: {', '.join(choices)}.")
