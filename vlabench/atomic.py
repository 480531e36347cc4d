"""Atomic file writes: readers never see a partial file, and what lands has the modes ``open()`` would give it.

Temporary files and folders are named ``<prefix><writer pid>-<random>``, so a later run can tell the debris of a
killed writer (its process is gone) from a write in progress, and remove it (``remove_stale``). A write that fails
(a full disk, a quota, an I/O error) raises ``WriteError``; ``rescue_text`` keeps the text somewhere else."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from vlabench.errors import InputError, VlabenchError

PARTIAL_PREFIX = ".partial-"
STALE_AFTER_S = 3600.0
"""A temporary entry this old is debris even when its writer's process id is in use again."""
UNSAVED_PREFIX = "vlabench-unsaved-"


class WriteError(VlabenchError):
    """A file could not be written (exit code 1): the folder cannot be created, the disk is full, a quota is
    exhausted, an I/O error. ``errno`` is the operating system's reason."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


def current_umask() -> int:
    """The process umask, read without changing it where Linux reports it (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """What ``open(path, "w")`` gives a new file: 0o666 less the umask (0o644 under the usual 022)."""
    return 0o666 & ~current_umask()


def folder_mode() -> int:
    """What ``mkdir`` gives a new folder: 0o777 less the umask (0o755 under the usual 022)."""
    return 0o777 & ~current_umask()


def owned_prefix(prefix: str) -> str:
    """``prefix`` followed by this process's id: the name says which process a temporary entry belongs to."""
    return f"{prefix}{os.getpid()}-"


def staging_file(folder: Path, prefix: str, suffix: str = "") -> tuple[int, str]:
    """``mkstemp`` in ``folder`` (private 0o600 by design), opened up to the umask's mode for the final file."""
    fd, path = tempfile.mkstemp(dir=folder, prefix=owned_prefix(prefix), suffix=suffix)
    os.fchmod(fd, file_mode())
    return fd, path


def staging_folder(parent: Path, prefix: str) -> Path:
    """``mkdtemp`` in ``parent`` (private 0o700 by design), opened up to the umask's mode for the final folder."""
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=owned_prefix(prefix)))
    folder.chmod(folder_mode())
    return folder


def publish_folder(staging: Path, folder: Path, marker: str = "meta.json") -> bool:
    """Rename a filled ``staging`` folder over ``folder``; False when another process published a complete one
    (holding ``marker``) first: ``staging`` is then removed and theirs is used. Caches filled by concurrent runs
    (two test workers, two sweeps) never fail on each other."""
    try:
        os.replace(staging, folder)
    except OSError:
        if not (folder / marker).exists():
            raise
        shutil.rmtree(staging, ignore_errors=True)
        return False
    return True


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def atomic_write_text(target: Path, text: str) -> Path:
    """A temporary file in the target's folder, fsynced, then renamed: readers never see a partial file. Any
    failure raises ``WriteError`` and leaves no temporary file behind."""
    out_dir = target.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = staging_file(out_dir, PARTIAL_PREFIX, target.suffix)
    except OSError as exc:
        raise WriteError(f"cannot write to {out_dir}: {_reason(exc)}", exc.errno) from None
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise WriteError(f"cannot write {target}: {_reason(exc)}", exc.errno) from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def writable_folder_problem(folder: Path) -> str | None:
    """Why files cannot be written into ``folder``, or None: a probe file is created, written and removed in it (or,
    while it does not exist yet, in its nearest existing parent, so nothing is left behind when a later check
    refuses the run), so a read-only mount, a full disk's missing inodes or a file in the way show before any work."""
    existing = next((parent for parent in (folder, *folder.parents) if parent.exists() or parent.is_symlink()), None)
    if existing is None or not existing.is_dir():
        return f"{existing} is not a folder" if existing is not None else "no parent folder exists"
    try:
        fd, probe = staging_file(existing, PARTIAL_PREFIX, ".probe")
    except OSError as exc:
        return _reason(exc)
    try:
        os.write(fd, b"\n")
    except OSError as exc:
        return _reason(exc)
    finally:
        os.close(fd)
        Path(probe).unlink(missing_ok=True)
    return None


def require_writable(folder: Path, flag: str, what: str = "a result") -> None:
    """Refuse, before any work (exit 2), an output folder that cannot take a file (``writable_folder_problem``)."""
    problem = writable_folder_problem(folder)
    if problem:
        raise InputError(f"{flag} {folder}: cannot write {what} there: {problem}")


def _writer_gone(name: str, prefix: str) -> bool:
    """Whether the process id in ``<prefix><pid>-<random>`` names no running process (False when the name has none
    or the process exists, also as another user's)."""
    pid = name[len(prefix) :].split("-", 1)[0]
    if not pid.isdigit() or int(pid) <= 0 or "-" not in name[len(prefix) :]:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def remove_stale(folder: Path, prefix: str = PARTIAL_PREFIX, max_age_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove the temporary files and folders named ``<prefix>…`` directly in ``folder`` that a killed writer left:
    those whose writer process is gone, and any older than ``max_age_s``. Returns what was removed; entries that
    cannot be removed are left (and not returned)."""
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        try:
            old = now - entry.lstat().st_mtime > max_age_s
        except OSError:
            continue
        if not (old or _writer_gone(entry.name, prefix)):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed


def unsaved_path(name: str) -> Path:
    """Where ``rescue_text`` puts a document that could not be written where it belongs."""
    return Path(tempfile.gettempdir()) / f"{UNSAVED_PREFIX}{name}"


def rescue_text(text: str, name: str) -> Path | None:
    """Best effort for a document whose write failed: ``$TMPDIR/vlabench-unsaved-<name>``; None when that fails too
    (the caller then prints it)."""
    with contextlib.suppress(VlabenchError):
        return atomic_write_text(unsaved_path(name), text)
    return None


def atomic_write_json(target: Path, document: object) -> Path:
    """``document`` as indented JSON (strict: NaN and infinities are refused before anything is written), written
    atomically (``atomic_write_text``)."""
    return atomic_write_text(target, json.dumps(document, indent=2, allow_nan=False) + "\n")
