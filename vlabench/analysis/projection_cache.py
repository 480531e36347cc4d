"""On-disk cache of the projection model's traced inputs and of its fit, under ``<cache root>/projection``.

Tracing every replica on the meta device (operators, kernels, parameters) dominates ``vlabench project --all``;
its results depend only on the model spec, the workload, the precision and the code that traces, so they are
stored as JSON keyed by a hash of all of them: the spec's content hash, the workload, the precision, vlabench's and
torch's versions, and a fingerprint of the source files of the tracing code (``FACT_SOURCES``; any edit there
invalidates every entry). The fit is keyed the same way by its own inputs and code (``FIT_SOURCES``). A missing,
unreadable or invalid entry is recomputed and rewritten atomically; ``VLABENCH_CACHE`` moves the root (as for
exported graphs).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TypeVar

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from vlabench import __version__
from vlabench.analysis.flops import count_operators
from vlabench.analysis.kernel_counts import KernelCounts, count_kernels
from vlabench.analysis.memory import deployment_footprint, traced_terms
from vlabench.atomic import WriteError, atomic_write_text
from vlabench.backends.onnx_export import cache_root
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload

FORMAT = "vlabench-projection-2"  # bump when what is stored changes shape
PACKAGE = Path(__file__).resolve().parents[1]
FACT_SOURCES = (
    "models/replicas",
    "models/specs.py",
    "models/specs_visuomotor.py",
    "models/spec_base.py",
    "models/workload.py",
    "analysis/flops.py",
    "analysis/flops_traced.py",
    "analysis/operators.py",
    "analysis/kernel_counts.py",
    "analysis/memory.py",
    "analysis/projection_cache.py",
    "vocab.py",
)
"""The code traced facts depend on (relative to the package): the specs, the replicas, the counters."""
FIT_SOURCES = (
    *FACT_SOURCES,
    "analysis/operator_mix.py",
    "analysis/projection_fit.py",
    "analysis/projection_stacks.py",
    "analysis/projection_score.py",
)
"""The code a fit depends on: the facts' code and the model and its fit."""

Cached = TypeVar("Cached", bound=BaseModel)


class ModelFacts(BaseModel):
    """What the projection needs from a (spec, workload, precision), traced once."""

    model_config = ConfigDict(frozen=True)

    operators: dict[str, list[tuple[float, float, float]]]
    """phase (vision, prefill, denoise_step) -> per operator (FLOPs, bytes moved, weight bytes), in order"""
    kernels: KernelCounts
    footprint_bytes: dict[str, int]
    """stack -> resident bytes of the model deployed by it (``memory.deployment_footprint``)"""


@cache
def files_fingerprint(root: Path, entries: tuple[str, ...], pattern: str = "*.py") -> str:
    """A hash of every file of ``entries`` under ``root`` (a file, or a folder's ``pattern`` files, recursively):
    their paths and content, not their times."""
    digest = hashlib.sha256()
    for entry in entries:
        path = root / entry
        for file in sorted(path.rglob(pattern)) if path.is_dir() else [path]:
            digest.update(file.relative_to(root).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def code_fingerprint(sources: tuple[str, ...]) -> str:
    """A hash of every source file in ``sources`` (their content, not their times)."""
    return files_fingerprint(PACKAGE, sources)


def cache_key(kind: str, identity: dict) -> str:
    """A hash of ``identity`` with the format, the versions and the fingerprint of the code ``kind`` depends on."""
    full = {
        "format": FORMAT,
        "kind": kind,
        "vlabench": __version__,
        "torch": torch.__version__,
        "code": code_fingerprint(FACT_SOURCES if kind == "facts" else FIT_SOURCES),
        **identity,
    }
    return hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cache_path(kind: str, identity: dict) -> Path:
    return cache_root() / "projection" / kind / f"{cache_key(kind, identity)}.json"


def seed_root() -> Path:
    """The entries shipped with vlabench (``profiles/projection-seed``, written by
    ``benchmarks/seed_projection_cache.py``): what the bundled site and ``project --all`` need, so a first run
    reads them instead of tracing and fitting for minutes. Keyed like the cache, so a seed older than the code or
    the profiles is never read: its entries' keys no longer match."""
    return Path(str(resources.files("vlabench.profiles"))) / "projection-seed"


def cached(kind: str, identity: dict, schema: type[Cached], compute: Callable[[], Cached]) -> Cached:
    """The stored ``schema`` for ``identity`` when present and valid (in the cache, else in the shipped seed), else
    ``compute()``, stored (best effort). Processes that miss the same entry at once (parallel test workers, a sweep
    and a site build) compute it once: the others wait on its lock file and read what it stored."""
    path = cache_path(kind, identity)
    stored = _stored(path, schema)
    if stored is None:
        stored = _stored(seed_root() / kind / path.name, schema)
    if stored is not None:
        return stored
    with _entry_lock(path):
        stored = _stored(path, schema)
        if stored is not None:
            return stored
        value = compute()
        with contextlib.suppress(WriteError):  # a read-only or full cache folder costs time, never a result
            atomic_write_text(path, value.model_dump_json())
    return value


def _stored(path: Path, schema: type[Cached]) -> Cached | None:
    try:
        return schema.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError):
        return None


@contextlib.contextmanager
def _entry_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path``'s entry (nothing when the cache folder cannot take a lock file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


_FACTS: dict[str, ModelFacts] = {}


def stack_runtimes() -> dict[str, int]:
    """Bytes each stack's runtime holds: its vlabench backend's arena, none for a stack without a backend."""
    from vlabench.analysis.projection_stacks import stacks
    from vlabench.backends import BACKENDS

    return {s.name: BACKENDS[s.backend].runtime_bytes if s.backend in BACKENDS else 0 for s in stacks().values()}


def model_facts(spec: ModelSpec, workload: Workload, precision: str) -> ModelFacts:
    """Operators, kernel counts and deployed footprints of (spec, workload, precision): from memory, the disk cache,
    or traced on the meta device."""
    runtimes = stack_runtimes()
    identity = {
        "spec": spec.spec_hash,
        "workload": workload.model_dump(mode="json"),
        "precision": precision,
        "runtimes": runtimes,
    }
    key = cache_key("facts", identity)
    if key not in _FACTS:
        _FACTS[key] = cached("facts", identity, ModelFacts, lambda: _trace_facts(spec, workload, precision, runtimes))
    return _FACTS[key]


def _trace_facts(spec: ModelSpec, workload: Workload, precision: str, runtimes: dict[str, int]) -> ModelFacts:
    operators: dict[str, list[tuple[float, float, float]]] = {"vision": [], "prefill": [], "denoise_step": []}
    for op in count_operators(spec, workload, precision):
        operators[op.phase].append((op.flops, op.bytes, op.weight_bytes))
    return ModelFacts(
        operators=operators,
        kernels=count_kernels(spec, workload, precision),
        footprint_bytes={
            stack: deployment_footprint(spec, workload, precision, runtime, traced)
            for traced in [traced_terms(spec, workload)]
            for stack, runtime in runtimes.items()
        },
    )
