"""Atomic file writes: readers never see a partial file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from vlabench.errors import VlabenchError


def atomic_write_text(target: Path, text: str) -> Path:
    """A temporary file in the target's folder, fsynced, then renamed: readers never see a partial file."""
    out_dir = target.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=out_dir, prefix=".partial-", suffix=target.suffix)
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
