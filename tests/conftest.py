import os

os.environ.setdefault("MUJOCO_GL", "egl")  # Meta-World's camera renders headless; MuJoCo reads it on import

import pytest
import torch

from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation


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


def runnable_params(reasons: dict[str, str | None]) -> list:
    """One pytest param per kernel path, skipped with its reason where the path cannot run on this CPU."""
    return [
        pytest.param(path, marks=pytest.mark.skipif(reason is not None, reason=f"the {path} path cannot run: {reason}"))
        for path, reason in reasons.items()
    ]


# Test tiers (markers registered in pyproject.toml; `python3 -m pytest -m unit` is the quick tier). A test is in the
# browser tier when it drives chromium, ray when it starts a Ray cluster, gpu when it needs an NVIDIA GPU (it is
# skipped without one); otherwise unit when its module is one of UNIT_MODULES (pieces tested on their own, each test
# well under a second or two), else integration (real models through real runtimes, the CLI end to end, subprocesses).
UNIT_MODULES = frozenset(
    {
        "test_architecture",
        "test_artifacts",
        "test_attention_gqa",
        "test_batching",
        "test_wire",
        "test_serving_relations",
        "test_link",
        "test_caches",
        "test_cet",
        "test_cli_help",
        "test_closed_loop",
        "test_compare_validate",
        "test_devices",
        "test_device_profiles",
        "test_docs_render",
        "test_energy_meters",
        "test_execution_gate",
        "test_file_modes",
        "test_fp8",
        "test_fusion_overlap",
        "test_hostile_numbers",
        "test_hostile_yaml",
        "test_input_pipeline",
        "test_int8_attention",
        "test_loader_properties",
        "test_parity_transformers",
        "test_percentile_intervals",
        "test_precisions_and_cuda",
        "test_projection_seed",
        "test_proportions",
        "test_reduced_precision_families",
        "test_reference_fallback",
        "test_rotary_table",
        "test_sampler_runner",
        "test_sm_tracing",
        "test_specs",
        "test_system_state",
        "test_task_success",
    }
)
BROWSER_FIXTURES = frozenset({"browser", "index"})
GPU_FIXTURES = frozenset({"nvml_gpu"})
GPU_WORDS = ("CUDA", "TensorRT", "NVIDIA GPU")

os.environ.setdefault("COLUMNS", "200")  # tables and messages about long temporary paths stay on one line


def tier(item: pytest.Item) -> str:
    module = item.path.stem
    if BROWSER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "browser"
    if module == "test_ray_sweep":
        return "ray"
    reasons = [str(mark.kwargs.get("reason", "")) for mark in item.iter_markers("skipif")]
    needs_gpu = any(word in reason for reason in reasons for word in GPU_WORDS)
    if item.get_closest_marker("gpu") or needs_gpu or GPU_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "gpu"
    return "unit" if module in UNIT_MODULES else "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = tier(item)
        if not item.get_closest_marker(name):
            item.add_marker(getattr(pytest.mark, name))
