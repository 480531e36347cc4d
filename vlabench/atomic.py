"""Atomic file writes: readers never see a partial file, and what lands has the modes ``open()`` would give it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from vlabench.errors import VlabenchError


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


def staging_file(folder: Path, prefix: str, suffix: str = "") -> tuple[int, str]:
    """``mkstemp`` in ``folder`` (private 0o600 by design), opened up to the umask's mode for the final file."""
    fd, path = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    os.fchmod(fd, file_mode())
    return fd, path


def staging_folder(parent: Path, prefix: str) -> Path:
    """``mkdtemp`` in ``parent`` (private 0o700 by design), opened up to the umask's mode for the final folder."""
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    folder.chmod(folder_mode())
    return folder


def atomic_write_text(target: Path, text: str) -> Path:
    """A temporary file in the target's folder, fsynced, then renamed: readers never see a partial file."""
    out_dir = target.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = staging_file(out_dir, ".partial-", target.suffix)
    except OSError as exc:
        raise VlabenchError(f"cannot write to {out_dir}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
