"""Recorded real-world inputs for tests: sysfs trees (``path content`` per line) and the tiny model of every family."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).parent
TINY_MODELS = sorted(path.stem for path in (TESTS.parent / "profiles" / "models").glob("*-tiny.yaml"))
"""One tiny replica per model family, as the packaged profiles list them."""


def build_tree(recording: Path, root: Path) -> Path:
    """Materialise the recorded sysfs tree ``recording`` under ``root``."""
    for line in recording.read_text().splitlines():
        if line and not line.startswith("#"):
            relative, _, content = line.partition(" ")
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content + "\n")
    return root
