"""torch.compile (Inductor) over the three phase functions, compiled eagerly in ``prepare``; on the CPU with
Inductor's inference settings (weights frozen and prepacked for oneDNN, the C++ wrapper); on CUDA the whole
denoising loop can also be replayed as one captured CUDA graph (``sample_fused``)."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import fields
from types import SimpleNamespace
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from vlabench.backends.base import Backend, BackendOptions, PreparedPolicy
from vlabench.backends.torch.backend import TorchBackend, TorchOptions, parameters_target, torch_device_for
from vlabench.backends.torch.quantize import INT8_SCHEMES, build_torch_replica
from vlabench.errors import UnavailableError, unknown_name
from vlabench.hardware.targets import ExecutionTarget
from vlabench.kernels.expert_fusion import ExpertKVHoister
from vlabench.measure.action_loops import ActionLoop, EulerLoop, make_action_loop
from vlabench.measure.cold_start import stage
from vlabench.models.replicas import Observation, PrefixCache
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import Precision

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
WITHOUT_CUDAGRAPHS = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}
FULLGRAPH = True  # every phase of every replica traces without a graph break
CACHE_FIELDS = ("keys", "values", "valid", "state")
CAPTURE_WARMUP = 3
CPU_INFERENCE: dict[str, Any] = {"freezing": True, "cpp_wrapper": True}
"""Inductor's CPU inference settings, applied while the phases compile: ``freezing`` folds the weights into the
graph as constants, so linear layers run oneDNN kernels on weights packed once at compile time (not per call);
``cpp_wrapper`` calls the kernels from generated C++ instead of Python (less per-step overhead at batch 1). They
are compile-time settings (``torch.compile(options=...)`` does not apply ``freezing``; the config patch does)."""


def _compile(function: Callable, mode: str, frozen: bool = False) -> Callable:
    """``frozen``: the model's weights are folded into the graph (Inductor's ``freezing``); the per-call guards on
    its modules' attributes are then left out (``frozen_model_guards``)."""
    if not frozen:
        return torch.compile(function, mode=mode, fullgraph=FULLGRAPH, dynamic=False)
    from torch._inductor import list_mode_options

    options = {**list_mode_options(mode), "guard_filter_fn": frozen_model_guards}
    return torch.compile(function, options=options, fullgraph=FULLGRAPH, dynamic=False)


def frozen_model_guards(entries: list) -> list[bool]:
    """Which of dynamo's guards a frozen model's compiled phase keeps: all but those on its modules' attributes
    (hook dicts, attribute values, dict types: hundreds of checks on every call). Each module's type and each
    weight's identity stay guarded, so another model, or other weights, compiles anew instead of running this
    graph's folded constants; an attribute changed on this model after compiling is not seen, as its weights are
    not."""
    return [
        not entry.orig_guard.source.is_unspecialized_nn_module()
        or entry.guard_type == "ID_MATCH"
        or (entry.guard_type == "TYPE_MATCH" and isinstance(entry.value, nn.Module))
        for entry in entries
    ]


def _copy_cache(cache: Any) -> Any:
    """A copy of any family's cache with its tensors cloned."""
    return type(cache)(**{f.name: _clone(getattr(cache, f.name)) for f in fields(cache)})


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, Tensor) else value


class FusedDenoiseLoop:
    """All Euler steps captured as one CUDA graph over static noise and prefix-cache buffers."""

    def __init__(self, denoise: Callable, loop: EulerLoop, cache: PrefixCache, noise: Tensor) -> None:
        self.noise = noise.clone()
        self.cache = _copy_cache(cache)
        stepper = SimpleNamespace(denoise_step=denoise)
        current = torch.cuda.current_stream(noise.device)
        side = torch.cuda.Stream(noise.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(CAPTURE_WARMUP):
                loop.sample(stepper, self.cache, self.noise)
        current.wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.actions = loop.sample(stepper, self.cache, self.noise)

    def __call__(self, cache: PrefixCache, noise: Tensor) -> Tensor:
        pairs = [(self.noise, noise)] + [(getattr(self.cache, name), getattr(cache, name)) for name in CACHE_FIELDS]
        for static, value in pairs:
            if static.shape != value.shape:
                raise ValueError(f"fused loop was captured for shape {tuple(static.shape)}, got {tuple(value.shape)}")
            static.copy_(value)
        self.graph.replay()
        return self.actions.clone()


class CompiledPolicy(PreparedPolicy):
    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        mode: str,
        loop: ActionLoop,
        inductor: dict[str, Any] | None = None,
        quantization: dict[str, Any] | None = None,
        hoister: ExpertKVHoister | None = None,
    ) -> None:
        self.model = model
        self.quantization = quantization or {}
        self.hoister = hoister  # --fuse-expert-kv: the cross layers' prefix K/V projected once, after the prefill
        self.inductor = dict(CPU_INFERENCE if device.type == "cpu" else {}) if inductor is None else inductor
        self.device = device
        self.mode = mode
        self.loop = loop
        frozen = bool(self.inductor.get("freezing"))
        self._embed = _compile(model.embed_images, mode, frozen)
        self._prefill = _compile(model.prefill, mode, frozen)
        self._denoise = _compile(model.denoise_step, mode, frozen)
        self._decode = _compile(model.decode_step, mode, frozen) if hasattr(model, "decode_step") else None
        # Inductor's CUDA graph trees recycle a graph's outputs once the next compiled call starts: copy out the
        # outputs that outlive that call (the denoise velocity is consumed by the loop before the next step).
        self._copy_outputs = device.type == "cuda" and mode in WITHOUT_CUDAGRAPHS
        self.compile_s: dict[str, float] = {}
        self.fused: FusedDenoiseLoop | None = None
        self.fused_capture_s: float | None = None

    def executed_on(self) -> ExecutionTarget:
        return parameters_target(self.model)

    @torch.inference_mode()
    def embed_images(self, obs: Observation) -> Tensor:
        tokens = self._embed(obs.images)
        return tokens.clone() if self._copy_outputs else tokens

    @torch.inference_mode()
    def prefill(self, obs: Observation, image_tokens: Tensor) -> PrefixCache:
        """With expert-K/V fusion the cache leaves the prefix phase with the cross layers' prefix work done."""
        cache = self._prefill_unfused(obs, image_tokens)
        return self.hoister(cache) if self.hoister is not None else cache

    def _prefill_unfused(self, obs: Observation, image_tokens: Tensor) -> PrefixCache:
        cache = self._prefill(obs, image_tokens)
        return _copy_cache(cache) if self._copy_outputs else cache

    @torch.inference_mode()
    def denoise_step(self, x_t: Tensor, t: Tensor, cache: PrefixCache) -> Tensor:
        return self._denoise(x_t, t, cache)

    @torch.inference_mode()
    def decode_step(self, token: Tensor, cache: Any) -> tuple[Tensor, Tensor, Tensor]:
        if self._decode is None:
            raise NotImplementedError(f"{self.model.spec.name} does not decode tokens")
        return self._decode(token, cache)

    def prefix_lane(self) -> Callable[[Observation], PrefixCache]:
        if self.hoister is None:
            return self.prefix
        hoister = ExpertKVHoister(self.model, self.hoister.suffix_tokens, joint_buffers=False)

        @torch.inference_mode()
        def prefix(obs: Observation) -> PrefixCache:
            return hoister(self._prefill_unfused(obs, self.embed_images(obs)))

        return prefix

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def compile_phases(self, obs: Observation, noise: Tensor) -> PrefixCache:
        """Compile every phase by calling it once on example inputs (under the policy's Inductor settings),
        recording how long each first call took."""
        from torch._inductor import config as inductor_config

        with inductor_config.patch(self.inductor):
            return self._compile_phases(obs, noise)

    def _compile_phases(self, obs: Observation, noise: Tensor) -> PrefixCache:
        image_tokens = self._first_call("vision", self.embed_images, obs)
        cache = self._first_call("prefill", self.prefill, obs, image_tokens)
        if self._decode is not None and not hasattr(self.loop, "times"):
            token = torch.zeros(noise.shape[0], 1, dtype=torch.long, device=noise.device)
            self._first_call("decode", self.decode_step, token, _copy_cache(cache))
        else:
            self._first_call("denoise", self.denoise_step, noise, self.loop.times[0], cache)
        return cache

    def _first_call(self, phase: str, function: Callable, *args: Any) -> Any:
        self.synchronize()
        start = time.perf_counter()
        result = function(*args)
        self.synchronize()
        self.compile_s[phase] = time.perf_counter() - start
        return result

    @torch.inference_mode()
    def capture_fused(self, cache: PrefixCache, noise: Tensor) -> None:
        """Capture the whole denoising loop as one CUDA graph for ``sample_fused``."""
        if self.device.type != "cuda":
            raise UnavailableError(f"the fused denoise loop is a CUDA graph; it cannot run on {self.device}")
        mode = WITHOUT_CUDAGRAPHS.get(self.mode)
        denoise = self._denoise if mode is None else _compile(self.model.denoise_step, mode)
        start = time.perf_counter()
        self.fused = FusedDenoiseLoop(denoise, self.loop, cache, noise)
        self.synchronize()
        self.fused_capture_s = time.perf_counter() - start

    def fused_loop(self) -> Callable[[PrefixCache, Tensor], Tensor] | None:
        return self.sample_fused if self.fused is not None else None

    @torch.inference_mode()
    def sample_fused(self, cache: PrefixCache, noise: Tensor) -> Tensor:
        """All denoising steps as one CUDA graph replay; the same result as ``EulerLoop.sample`` on this policy."""
        if self.fused is None:
            self.capture_fused(cache, noise)
        return self.fused(cache, noise)

    def details(self) -> dict[str, Any]:
        from torch._inductor import config as inductor_config  # a 2 s import: only once compiling is under way

        cuda = self.device.type == "cuda"
        details = {
            "mode": self.mode,
            "fullgraph": FULLGRAPH,
            "dynamic": False,
            "torch": torch.__version__,
            "compiler": "inductor",
            "inductor_codegen": inductor_config.cuda_backend if cuda else inductor_config.cpu_backend,
            "intra_op_threads": torch.get_num_threads(),
            "inductor_settings": dict(self.inductor),
            "module_guards": "types and weights only (frozen)" if self.inductor.get("freezing") else "all",
            "compile_s": dict(self.compile_s),
            "compile_total_s": round(sum(self.compile_s.values()), 3),
            "fused_denoise_loop": self.fused is not None,
            "fuse_expert_kv": self.hoister is not None,
            **self.quantization,
        }
        if self.fused is not None:
            details["fused_capture_s"] = self.fused_capture_s
        return details


class TorchCompileOptions(TorchOptions):
    compile_mode: str = "default"  # one of COMPILE_MODES
    fuse_denoise_loop: bool = False


class TorchCompileBackend(Backend):
    captures_graphs = True
    fuses_expert_kv = True
    int8_schemes: ClassVar[tuple[str, ...]] = INT8_SCHEMES
    runtime_bytes = 512 * 2**20  # inductor, its compile workers and generated code
    name = "torch-compile"
    runtime_library = "torch"
    Options = TorchCompileOptions
    engines: ClassVar[dict[str, str]] = {"cpu": "on the host CPU (inductor C++)", "cuda": "on CUDA (inductor Triton)"}

    @classmethod
    def route(cls, engine: str, options: BackendOptions) -> tuple[torch.device, BackendOptions]:
        return torch_device_for(engine), options

    @classmethod
    def from_options(cls, options: BackendOptions) -> TorchCompileBackend:
        own = cls.own_options(options)
        return cls(own.compile_mode, own.fuse_denoise_loop, own.quant_scheme, own.fuse_expert_kv)

    def __init__(
        self,
        mode: str = "default",
        fuse_denoise_loop: bool = False,
        quant_scheme: str | None = None,
        fuse_expert_kv: bool = False,
    ) -> None:
        if mode not in COMPILE_MODES:
            raise unknown_name("compile mode", mode, COMPILE_MODES)
        self.mode = mode
        self.fuse_denoise_loop = fuse_denoise_loop
        self.quant_scheme = quant_scheme
        self.fuse_expert_kv = fuse_expert_kv

    def precisions(self, device: torch.device) -> tuple[str, ...]:
        """The torch backend's precisions: the quantized replicas compile too (their kernels stay opaque calls)."""
        return TorchBackend().precisions(device)

    def unavailable_reason(self, device: torch.device) -> str | None:
        reason = TorchBackend().unavailable_reason(device)
        if reason is None and device.type == "cuda" and importlib.util.find_spec("triton") is None:
            return "torch.compile on CUDA needs triton (pip install triton)"
        if reason is None and self.fuse_denoise_loop and device.type != "cuda":
            return f"the fused denoise loop is a CUDA graph; it cannot run on {device}"
        return reason

    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> CompiledPolicy:
        """Build the replica, compile all three phases now and, if asked (CUDA only), capture the fused loop."""
        dtype = Precision.dtype(precision)
        if self.fuse_denoise_loop and workload.action_loop != "euler":
            raise UnavailableError(
                f"the fused denoise loop captures Euler steps; {spec.name} runs {workload.action_loop}"
            )
        loop = make_action_loop(spec, workload, device)
        model, quantization = build_torch_replica(spec, seed, precision, device, self.quant_scheme)
        hoister = ExpertKVHoister(model, workload.suffix_tokens, joint_buffers=False) if self.fuse_expert_kv else None
        policy = CompiledPolicy(model, device, self.mode, loop, quantization=quantization, hoister=hoister)
        noise = initial_noise(workload, seed, dtype, device)
        with stage("compile"):
            cache = policy.compile_phases(synthetic_observation(spec, workload, seed, dtype, device), noise)
            if self.fuse_denoise_loop:
                policy.capture_fused(cache, noise)
        return policy
