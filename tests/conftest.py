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
