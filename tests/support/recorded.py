"""Recorded real-world inputs for tests: sysfs trees (``path content`` per line) and the tiny model of every family."""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import DATA, ROOT

TINY_MODELS = sorted(path.stem for path in (ROOT / "profiles" / "models").glob("*-tiny.yaml"))
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


def recorded_lines(name: str) -> list[str]:
    """The recorded lines of an energy tool's output (``tests/data/energy``), comments and blank lines left out."""
    return [line for line in (DATA / "energy" / name).read_text().splitlines() if line and not line.startswith("#")]
