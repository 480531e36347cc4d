import pytest
import torch
import torch.nn.functional as F

from vlabench.backends.base import BackendOptions
from vlabench.backends.torch.backend import TorchBackend
from vlabench.backends.torch_compile.backend import COMPILE_MODES, CPU_INFERENCE, CompiledPolicy, TorchCompileBackend
from vlabench.errors import InputError, UnavailableError
from vlabench.measure.action_loops import EulerLoop
from vlabench.models.replicas import build_replica
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles the replicas' forward code anew: compiles of earlier tests in this worker (other modules
    included) never count toward the recompile limit."""
    torch._dynamo.reset()


CUDA_MISSING = TorchCompileBackend(fuse_denoise_loop=True).unavailable_reason(torch.device("cuda"))
needs_cuda = pytest.mark.skipif(CUDA_MISSING is not None, reason=f"torch-compile on CUDA: {CUDA_MISSING}")


def sample(policy, spec, workload, device, seed=0):
    obs = synthetic_observation(spec, workload, seed, torch.float32, device)
    noise = initial_noise(workload, seed, torch.float32, device)
    return EulerLoop(workload.steps, workload.batch, device).sample(policy, policy.prefix(obs), noise)


def assert_matches(actions, reference):
    assert (actions - reference).abs().max() < 1e-4
    assert F.cosine_similarity(actions.flatten().double(), reference.flatten().double(), dim=0) > 0.99999


@pytest.mark.parametrize("name", ["smolvla-tiny", "pi0-tiny"])
def test_compiled_fp32_matches_eager_and_compiles_in_prepare(name):
    spec = load_model_spec(name)
    workload = Workload.from_spec(spec)
    cpu = torch.device("cpu")
    policy = TorchCompileBackend().prepare(spec, workload, cpu, "fp32", seed=0)
    details = policy.details()
    assert details["mode"] == "default" and details["fullgraph"] is True
    assert details["compile_s"].keys() == {"vision", "prefill", "denoise"}
    assert all(seconds > 0 for seconds in details["compile_s"].values())
    assert details["fused_denoise_loop"] is False
    assert details["inductor_settings"] == CPU_INFERENCE == {"freezing": True, "cpp_wrapper": True}
    assert details["compile_total_s"] == pytest.approx(sum(details["compile_s"].values()), abs=1e-3)
    with torch._dynamo.config.patch(error_on_recompile=True):  # prepare() already compiled every phase
        actions = sample(policy, spec, workload, cpu)
    assert_matches(actions, sample(TorchBackend().prepare(spec, workload, cpu, "fp32", seed=0), spec, workload, cpu))
    with torch.no_grad():  # frozen: the linear weights were folded into the compiled graphs (packed once)
        for module in policy.model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.zero_()
        with torch._dynamo.config.patch(error_on_recompile=True):
            assert torch.equal(sample(policy, spec, workload, cpu), actions)
    # the calls check the modules' types and weights, not their other attributes: a changed attribute is not seen
    # (as a changed weight's values are not), another weight compiles anew
    assert details["module_guards"] == "types and weights only (frozen)"
    norm = next(m for m in policy.model.modules() if hasattr(m, "eps"))
    norm.eps = 0.5
    with torch._dynamo.config.patch(error_on_recompile=True):
        assert torch.equal(sample(policy, spec, workload, cpu), actions)
    linear = next(m for m in policy.model.modules() if isinstance(m, torch.nn.Linear))
    linear.weight = torch.nn.Parameter(torch.ones_like(linear.weight), requires_grad=False)
    with torch._dynamo.config.patch(error_on_recompile=True), pytest.raises(torch._dynamo.exc.RecompileError):
        sample(policy, spec, workload, cpu)


@pytest.mark.parametrize("name", ["smolvla-tiny", "pi05-tiny"])  # pi05 stands for the π families (no cross layers)
def test_fused_expert_kv_projects_the_cross_layers_prefix_once_and_keeps_the_actions(name):
    """--fuse-expert-kv on torch-compile: the cross layers' prefix K/V projected after the prefill (SmolVLA; pi0 and
    pi05 have none), the joint layers left to the graph; eager's unfused actions, no recompiling after prepare, and
    a prefix lane with buffers of its own."""
    spec = load_model_spec(name)
    workload = Workload.from_spec(spec)
    cpu = torch.device("cpu")
    fused = TorchCompileBackend.from_options(BackendOptions(fuse_expert_kv=True)).prepare(
        spec, workload, cpu, "fp32", 0
    )
    eager = TorchBackend().prepare(spec, workload, cpu, "fp32", 0)  # unfused
    assert fused.details()["fuse_expert_kv"] is True and eager.details()["fuse_expert_kv"] is False
    obs = synthetic_observation(spec, workload, 1, torch.float32, cpu)
    unfused = eager.prefix(obs)
    caches = [fused.prefix(obs), fused.prefix(obs)]  # both of the hoister's static sets
    cross_layers = [i for i, layer in enumerate(fused.model.expert.layers) if layer.cross]
    assert sorted(caches[0].expert_kv.cross) == cross_layers and (name == "smolvla-tiny") == bool(cross_layers)
    assert caches[0].expert_kv.joint_keys is None and caches[0].expert_kv.joint_values is None
    lane = fused.prefix_lane()(obs)
    for index, (k, v) in lane.expert_kv.cross.items():  # what the unfused layer projects from the prefix cache
        expected = eager.model.expert.layers[index].project_prefix(unfused.keys[index], unfused.values[index])
        torch.testing.assert_close((k, v), expected, rtol=1e-4, atol=1e-5)
        assert k.data_ptr() not in {cache.expert_kv.cross[index][0].data_ptr() for cache in caches}
    for seed in range(2):  # the hoister's two static sets alternate across inferences
        with torch._dynamo.config.patch(error_on_recompile=True):
            actions = sample(fused, spec, workload, cpu, seed)
        assert_matches(actions, sample(eager, spec, workload, cpu, seed))


def test_unknown_compile_mode_is_an_input_error_listing_the_modes():
    with pytest.raises(InputError) as raised:
        TorchCompileBackend.from_options(BackendOptions(compile_mode="fastest"))
    assert all(mode in str(raised.value) for mode in COMPILE_MODES)
    assert [TorchCompileBackend.from_options(BackendOptions(compile_mode=m)).mode for m in COMPILE_MODES] == list(
        COMPILE_MODES
    )


def test_fused_loop_is_refused_off_cuda():
    cpu = torch.device("cpu")
    assert "CUDA graph" in TorchCompileBackend(fuse_denoise_loop=True).unavailable_reason(cpu)
    assert TorchCompileBackend().unavailable_reason(cpu) is None
    spec = load_model_spec("smolvla-tiny")
    workload = Workload.from_spec(spec)
    policy = CompiledPolicy(build_replica(spec, 0, torch.float32, cpu), cpu, "default", EulerLoop(2, 1, cpu))
    with pytest.raises(UnavailableError, match="CUDA graph"):
        policy.sample_fused(None, initial_noise(workload, 0, torch.float32, cpu))


@needs_cuda
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_cuda_matches_eager(mode):
    spec = load_model_spec("pi0-tiny")
    workload = Workload.from_spec(spec)
    cuda = torch.device("cuda")
    policy = TorchCompileBackend(mode).prepare(spec, workload, cuda, "fp32", seed=0)
    assert policy.details()["inductor_codegen"] == "triton"
    reference = sample(TorchBackend().prepare(spec, workload, cuda, "fp32", seed=0), spec, workload, cuda)
    for _ in range(3):  # reduce-overhead: warm-up, CUDA graph record, replay
        assert_matches(sample(policy, spec, workload, cuda), reference)


@needs_cuda
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_fused_cuda_graph_loop_matches_the_unfused_compiled_loop(mode):
    spec = load_model_spec("pi0-tiny")
    workload = Workload.from_spec(spec)
    cuda = torch.device("cuda")
    policy = TorchCompileBackend(mode, fuse_denoise_loop=True).prepare(spec, workload, cuda, "fp32", seed=0)
    details = policy.details()
    assert details["fused_denoise_loop"] is True and details["fused_capture_s"] > 0
    loop = EulerLoop(workload.steps, workload.batch, cuda)
    results = []
    for seed in (1, 2):  # inputs other than the captured ones, copied into the static buffers
        obs = synthetic_observation(spec, workload, seed, torch.float32, cuda)
        noise = initial_noise(workload, seed, torch.float32, cuda)
        cache = policy.prefix(obs)
        results.append((policy.sample_fused(cache, noise), loop.sample(policy, cache, noise)))
    for fused, unfused in results:  # the first result survives the second replay
        torch.testing.assert_close(fused, unfused, atol=1e-5, rtol=0)
    assert not torch.equal(results[0][0], results[1][0])
