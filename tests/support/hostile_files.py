"""Paths that are not regular UTF-8 text files (a FIFO, a directory, a symlink to /dev/zero, a binary, NUL bytes),
and the commands that read a file a user names."""

import os
from pathlib import Path


def make_file(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "nul":
        path.write_bytes(b"model: smolvla\n\0\0\0")
    return path


READERS = {
    "config": lambda path, out: ["run", "--config", str(path), "-o", str(out)],
    "sweep": lambda path, out: ["sweep", str(path), "--dry-run", "-o", str(out)],
    "energy-log": lambda path, out: ["run", "-m", "smolvla-tiny", "--energy-log", str(path), "-o", str(out)],
}
WHAT = {"config": "run config", "sweep": "sweep file", "energy-log": "power log"}

KINDS = ["fifo", "directory", "dev-zero", "binary", "nul"]
