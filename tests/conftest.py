import fcntl
import functools
import os
import shutil
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")  # Meta-World's camera renders headless; MuJoCo reads it on import
# Inductor compiles generated C++ in-process, not in a pool of worker processes: on two cores shared by two test
# workers the pool adds no parallelism, and it shuts down after 60 s idle, so each test that compiles again later
# starts two fresh interpreters that import torch. Read when torch._inductor.config is imported; children inherit it.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest
import torch
import typer.main
import typer.testing

from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation

# typer's CliRunner builds the click command tree from the app's signatures at every invoke (about 40 ms for
# vlabench's app on 2 cores: most of an invocation refused while parsing, and tests/integration/cli makes hundreds).
# The tree depends only on the commands registered on the app, which no test changes after invoking it: build it
# once per app. (typer.testing calls typer.main.get_command through this module-level name.)
typer.testing._get_command = functools.cache(typer.main.get_command)


@pytest.fixture(autouse=True)
def _single_thread():
    """Tests share two cores with other processes; one intra-op thread keeps tiny-model timing sane."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def tiny_inputs():
    def make(name: str, seed: int = 0, dtype: torch.dtype = torch.float32):
        spec = load_model_spec(name)
        workload = Workload.from_spec(spec)
        cpu = torch.device("cpu")
        return (
            spec,
            workload,
            synthetic_observation(spec, workload, seed, dtype, cpu),
            initial_noise(workload, seed, dtype, cpu),
        )

    return make


@pytest.fixture
def make_host():
    """A HostInfo for a 2-core x86 machine with no accelerator; keyword overrides change any field."""
    from vlabench.hardware.detection import HostInfo

    def make(**overrides) -> HostInfo:
        values = dict(
            arch="x86_64",
            cpu_model="AMD EPYC",
            logical_cores=2,
            physical_cores=2,
            memory_gb=24.0,
            cuda_devices=(),
            jetson_model=None,
        )
        return HostInfo(**{**values, **overrides})

    return make


@pytest.fixture(scope="module")
def cache_folder(tmp_path_factory):
    """One export cache per test module: each tiny model is exported (or quantized) once, not once per test."""
    return tmp_path_factory.mktemp("vlabench-cache")


@pytest.fixture
def module_cache(cache_folder, monkeypatch):
    """Point vlabench's cache (``$VLABENCH_CACHE``) at the module's own folder."""
    monkeypatch.setenv("VLABENCH_CACHE", str(cache_folder))
    return cache_folder


# Test tiers (markers registered in pyproject.toml; `python3 -m pytest -m unit` is the quick tier), from the folder a
# test module sits in under tests/: unit/ (pieces tested on their own, mirroring the source packages: no compile, no
# kernel build, no subprocess, no clock), integration/ (real models through real runtimes, the CLI end to end,
# subprocesses, torch.compile, C++ kernel builds), browser/ (drives chromium) and ray/ (starts a Ray cluster). A test
# that needs an NVIDIA GPU (it is skipped without one) is in the gpu tier wherever it sits; a module directly in
# tests/ is integration until it is placed.
FOLDER_TIERS = ("unit", "integration", "browser", "ray")
TESTS = Path(__file__).parent
GPU_FIXTURES = frozenset({"nvml_gpu"})
GPU_WORDS = ("CUDA", "TensorRT", "NVIDIA GPU")

os.environ.setdefault("COLUMNS", "200")  # tables and messages about long temporary paths stay on one line


def tier(item: pytest.Item) -> str:
    folder = item.path.relative_to(TESTS).parts[0]
    if folder in ("browser", "ray"):
        return folder
    reasons = [str(mark.kwargs.get("reason", "")) for mark in item.iter_markers("skipif")]
    needs_gpu = any(word in reason for reason in reasons for word in GPU_WORDS)
    if item.get_closest_marker("gpu") or needs_gpu or GPU_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "gpu"
    return folder if folder in FOLDER_TIERS else "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = tier(item)
        if not item.get_closest_marker(name):
            item.add_marker(getattr(pytest.mark, name))


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory):
    """The leaderboard's inputs: two real runs of smolvla-tiny and the edge cases derived from them (support.site).
    Built once per test session and shared by the xdist workers (``shared_folder``): tests only read it."""
    from tests.support.site import site_results

    return shared_folder(tmp_path_factory, "site-results", site_results)


def shared_folder(tmp_path_factory, name: str, build) -> Path:
    """``build(folder)`` once per test session, the folder then read by every xdist worker: the workers' temporary
    folders share a parent, in which the first worker to take the lock builds while the others wait for it. A build
    that failed leaves no mark of completion, so the next worker to ask builds anew (and fails the same way)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-N/, above each worker's popen-gwK/
    folder, done = root / name, root / f"{name}.built"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def built(results_dir, tmp_path_factory):
    """The leaderboard site built from ``results_dir``: its build report and its folder."""
    from tests.support.site import TARGET_HZ
    from vlabench.leaderboard_site.build import build_site

    out = tmp_path_factory.mktemp("site-out") / "site"
    report = build_site([results_dir], out, control_hz=TARGET_HZ)
    return report, out


@pytest.fixture(scope="session")
def table(built) -> list[dict]:
    """The ranked rows of ``leaderboard.json``."""
    import json

    return json.loads((built[1] / "leaderboard.json").read_text())["rows"]


@pytest.fixture(scope="session")
def fast_run():
    """The cheapest run that still measures (``tests/support/fast_run.py``): ``fast_run.args()`` for the CLI,
    ``fast_run.config(model=...)`` for a RunConfig, ``fast_run.fields()`` for its settings; keyword overrides change
    a setting (None leaves it at its default)."""
    from tests.support.fast_run import FAST_RUN

    return FAST_RUN
