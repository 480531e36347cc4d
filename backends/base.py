"""The one backend interface: a backend prepares a model for a target and returns a two-phase policy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch import Tensor

from vlabench.errors import InputError, UnavailableError
from vlabench.measure.policy import PreparedPolicy
from vlabench.models.replicas import Observation
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision


@dataclass(frozen=True)
class BackendOptions:
    """The backend flags of a run, as given; each backend reads and validates its own (``Backend.Options``)."""

    ep: str | None = None  # onnxruntime execution provider
    device_target: str | None = None  # openvino device: CPU, GPU, NPU, ...
    compile_mode: str = "default"  # torch.compile mode
    fuse_denoise_loop: bool = False  # torch-compile on CUDA: replay the whole denoise loop as one CUDA graph
    profile_nodes: bool = False  # onnxruntime / openvino: enable the runtime's per-node profiler
    fuse_expert_kv: bool = False  # torch backends: hoist the expert's prefix K/V work out of the denoising loop
    quant_scheme: str | None = None  # int8: how it is quantized (``Backend.int8_schemes``); None: the default


class NoOptions(BaseModel):
    """The options model of a backend with no flags of its own; a backend's ``Options`` extends it with the
    ``BackendOptions`` fields it reads."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Backend(ABC):
    """A runtime adapter. Its capabilities are class attributes, read by the planner and the profiler."""

    name: str
    runtime_library: ClassVar[str]
    """The library that executes the prepared policy (a distribution name): provenance records its version, and the
    site labels the run's software stack with it."""
    Options: ClassVar[type[NoOptions]] = NoOptions
    """This backend's own options: the run's flags it reads, validated by ``own_options``."""
    is_reference: ClassVar[bool] = False
    """The exact path (at fp32) every other run's actions are gated against. Not inherited: a subclass of the
    reference backend is a variant of it, and gated like any other."""
    profiles_nodes: ClassVar[bool] = False
    """The runtime has its own per-node profiler (``BackendOptions.profile_nodes``)."""
    fuses_expert_kv: ClassVar[bool] = False
    """Can hoist the action expert's prefix K/V projections out of the loop (``--fuse-expert-kv``)."""
    captures_graphs: ClassVar[bool] = False
    """Can replay the whole denoising loop as one captured graph (``--fuse-denoise-loop``)."""
    int8_schemes: ClassVar[tuple[str, ...]] = ()
    """The int8 quantization schemes ``--quant-scheme`` chooses between, the default first (empty: one fixed)."""
    runtime_bytes: ClassVar[int] = 48 * 2**20
    """The runtime's own memory once it runs a tiny model: libraries, thread pools, arenas (measured ×1.5-3), for
    the memory estimate (``analysis.memory``)."""
    exports_graphs: ClassVar[bool] = False
    """Runs exported graphs: the exporter holds a traced copy of the weights, the runtime its own copy, and the
    graph's attention is plain matmul + softmax, so its scores are materialized (the memory estimate counts them)."""
    engines: ClassVar[dict[str, str]] = {"cpu": "on the host CPU"}
    """The compute engines (``hardware.targets.Engine``) this backend can execute on, each with how it gets there
    (shown when a run is refused)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "is_reference" not in cls.__dict__:
            cls.is_reference = False

    @classmethod
    def own_options(cls, flags: BackendOptions) -> NoOptions:
        """The flags this backend reads, validated by its ``Options`` model (InputError when one is invalid)."""
        try:
            return cls.Options.model_validate({name: getattr(flags, name) for name in cls.Options.model_fields})
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise InputError(f"backend '{cls.name}': {problems}") from None

    @classmethod
    def from_options(cls, options: BackendOptions) -> Backend:
        """The backend for a run's flags; one with options builds itself from ``own_options``."""
        cls.own_options(options)
        return cls()

    @classmethod
    def route(cls, engine: str, options: BackendOptions) -> tuple[torch.device, BackendOptions]:
        """The torch device for inputs and outputs, and the options, that make this backend execute on ``engine``
        (one of ``engines``); UnavailableError when options contradict it or its runtime is missing here."""
        if engine != "cpu":
            raise UnavailableError(f"backend '{cls.name}' does not execute on {engine}")
        return torch.device("cpu"), options

    def precisions(self, device: torch.device) -> tuple[str, ...]:
        """Precisions this backend runs on ``device``."""
        return tuple(Precision.DTYPES)

    @abstractmethod
    def unavailable_reason(self, device: torch.device) -> str | None:
        """None when the backend can run on ``device`` here, else why not (shown to the user)."""

    @abstractmethod
    def prepare(
        self, spec: ModelSpec, workload: Workload, device: torch.device, precision: str, seed: int
    ) -> PreparedPolicy:
        """Build the seeded replica and make it runnable on ``device`` at ``precision``."""


class GraphPolicy(PreparedPolicy):
    """A policy made of exported graphs (see ``onnx_export.graph_signatures``); subclasses run one graph."""

    def __init__(self, details: dict[str, Any], graphs: dict[str, tuple[list[str], list[str]]], cache_type: type):
        self._details = details
        self.graphs = graphs
        self.cache_type = cache_type
        step = graphs.get("denoise") or graphs["decode"]
        self.cache_names = step[0][2 if "denoise" in graphs else 1 :]

    @abstractmethod
    def run_graph(self, graph: str, feeds: dict[str, Tensor]) -> dict[str, Tensor]:
        """Run ``graph`` on the named inputs it has (extra feeds are ignored); outputs by name."""

    def embed_images(self, obs: Observation) -> Tensor:
        return self.run_graph("vision", {"images": obs.images})["image_tokens"]

    def prefill(self, obs: Observation, image_tokens: Tensor) -> Any:
        feeds = {
            "image_tokens": image_tokens,
            "language_tokens": obs.language_tokens,
            "language_mask": obs.language_mask,
            "state": obs.state,
        }
        computed = self.run_graph("prefill", feeds)
        handed = {name: feeds[name] for name in self.cache_names if name not in computed}
        return self.cache_type(**computed, **handed)

    def _cache_feeds(self, cache: Any) -> dict[str, Tensor]:
        return {name: getattr(cache, name) for name in self.cache_names}

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: Any) -> Tensor:
        feeds = {"x_t": x_t, "t": t, **self._cache_feeds(cache)}
        return self.run_graph("denoise", feeds)["velocity"].to(x_t.dtype)

    def decode_step(self, token: Tensor, cache: Any) -> tuple[Tensor, Tensor, Tensor]:
        out = self.run_graph("decode", {"token": token, **self._cache_feeds(cache)})
        return out["logits"], out["new_keys"], out["new_values"]

    def details(self) -> dict[str, Any]:
        return self._details
