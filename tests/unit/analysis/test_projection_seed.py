"""The projection cache's shipped seed (``profiles/projection-seed``, ``benchmarks/seed_projection_cache.py``): an
entry found there is read instead of computed, one keyed otherwise never is, and the committed seed was written from
the code and profiles of this tree (else a first ``site build`` traces and fits for minutes)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from pydantic import BaseModel

from tests.support.paths import ROOT
from vlabench.analysis import projection_cache


class Entry(BaseModel):
    value: int


def _seed_script():
    spec = importlib.util.spec_from_file_location("seed_projection_cache", ROOT / "benchmarks/seed_projection_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def seeded(tmp_path, monkeypatch):
    """An empty cache and a seed folder of its own."""
    monkeypatch.setenv("VLABENCH_CACHE", str(tmp_path / "cache"))
    seed = tmp_path / "seed"
    monkeypatch.setattr(projection_cache, "seed_root", lambda: seed)
    return seed


def test_an_entry_in_the_seed_is_read_and_one_keyed_otherwise_is_computed(seeded):
    identity = {"what": "a seeded entry"}
    name = projection_cache.cache_path("facts", identity).name
    (seeded / "facts").mkdir(parents=True)
    (seeded / "facts" / name).write_text(Entry(value=7).model_dump_json())
    computed = []

    def compute() -> Entry:
        computed.append(1)
        return Entry(value=1)

    assert projection_cache.cached("facts", identity, Entry, compute) == Entry(value=7) and computed == []
    assert projection_cache.cached("facts", {"what": "another"}, Entry, compute) == Entry(value=1) and computed == [1]


def test_a_seed_entry_that_does_not_validate_is_computed_instead(seeded):
    identity = {"what": "a damaged entry"}
    (seeded / "facts").mkdir(parents=True)
    (seeded / "facts" / projection_cache.cache_path("facts", identity).name).write_text("{not json")
    assert projection_cache.cached("facts", identity, Entry, lambda: Entry(value=3)) == Entry(value=3)


def test_the_committed_seed_was_written_from_this_tree():
    script = _seed_script()
    recorded = json.loads((script.SEED / "manifest.json").read_text())
    if recorded["torch"] != torch.__version__:
        pytest.skip(f"the seed was written with torch {recorded['torch']}; this is {torch.__version__}: not read here")
    current = script.manifest()
    stale = sorted(key for key, value in current.items() if recorded.get(key) != value)
    assert not stale, f"profiles/projection-seed is stale ({', '.join(stale)}): run benchmarks/seed_projection_cache.py"
    entries = list(script.SEED.rglob("*.json"))
    assert len(entries) > 1 and {path.parent.name for path in entries} >= {"facts", "fit"}
