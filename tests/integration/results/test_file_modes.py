"""Results, exported graphs and the site land with the modes ``open()``/``mkdir`` give under the umask, so a
colleague or a web server on the same host can read them (mkstemp/mkdtemp alone would leave 0600/0700)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vlabench.atomic import atomic_write_text, staging_folder
from vlabench.commands.run import execute, plan_run
from vlabench.leaderboard_site.build import build_site
from vlabench.results.schema import write_result


@pytest.fixture
def umask():
    previous = os.umask(0o022)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(
    ("mask", "file", "folder"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700), (0o002, 0o664, 0o775)]
)
def test_atomic_writes_follow_the_umask(tmp_path, umask, mask, file, folder):
    umask(mask)
    assert mode(atomic_write_text(tmp_path / "result.json", "{}")) == file
    assert mode(staging_folder(tmp_path, ".staging-")) == folder


def test_a_result_and_the_site_are_readable_by_others_under_umask_022(fast_run, tmp_path, umask):
    umask(0o022)
    config = fast_run.config(model="smolvla-tiny", threads=None, out=tmp_path / "r")
    result_path = write_result(execute(plan_run(config)), config.out)
    assert mode(result_path) == 0o644
    site = tmp_path / "site"
    build_site([config.out], site)
    assert mode(site) == 0o755
    pages = [path for path in site.rglob("*") if path.is_file()]
    folders = [path for path in site.rglob("*") if path.is_dir()]
    assert pages and all(mode(path) == 0o644 for path in pages), {str(p): oct(mode(p)) for p in pages}
    assert all(mode(path) == 0o755 for path in folders)
