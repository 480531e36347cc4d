"""Export a replica's phases to three static-shape ONNX graphs, cached on disk.

vision:  images -> image_tokens
prefill: image_tokens, language_tokens, language_mask, state -> the family's prefix-cache tensors
denoise: x_t, t, cache tensors -> velocity (one action-head call: flow velocity, predicted noise, or the chunk)
decode:  token, cache tensors -> logits, new_keys, new_values (token decoders: one decode step)

The cache tensors are the fields of the family's cache dataclass (e.g. keys, values, valid, state for SmolVLA/π0);
``meta.json`` records each graph's signature and the cache class.

The replicas already avoid the known export breakers (models.md §6): masks are built from int64 cumsums, RoPE is
the real-valued rotate-half form, RMSNorm is decomposed, the K/V cache is plain tensors. The TorchScript-based
exporter is used: it is an order of magnitude faster than the dynamo exporter on these graphs and gives the same
numerics (checked by the tests).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass, fields
from importlib import import_module
from pathlib import Path

import torch
from torch import Tensor, nn

from vlabench.atomic import publish_folder, staging_folder
from vlabench.errors import UnavailableError
from vlabench.measure.cold_start import stage
from vlabench.models.replicas import Observation, build_replica
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import Precision

OPSET = 18
EXPORT_FORMAT = "vlabench-onnx-5"  # bump when graph boundaries or names change
OBSERVATION = ["image_tokens", "language_tokens", "language_mask", "state"]


def cache_fields(cache: object) -> list[str]:
    """The tensor fields of a family's prefix cache: the prefill graph's outputs and the step graph's inputs."""
    return [field.name for field in fields(cache) if isinstance(getattr(cache, field.name), Tensor)]


def passthrough_fields(cache: object, obs: Observation) -> list[str]:
    """Cache fields that are observation tensors handed through (e.g. the state): not prefill outputs."""
    given = {id(value) for value in vars(obs).values()}
    return [name for name in cache_fields(cache) if id(getattr(cache, name)) in given]


def graph_signatures(cache: object, obs: Observation, action_loop: str) -> dict[str, tuple[list[str], list[str]]]:
    """Input and output names of each graph: vision, prefill, and the action step (``denoise`` for loops and single
    passes, ``decode`` for token decoders). Observation fields the cache hands through keep their input name."""
    names = cache_fields(cache)
    passed = passthrough_fields(cache, obs)
    step = (
        {"decode": (["token", *names], ["logits", "new_keys", "new_values"])}
        if action_loop == "greedy_decode"
        else {"denoise": (["x_t", "t", *names], ["velocity"])}
    )
    computed = [name for name in names if name not in passed]
    return {"vision": (["images"], ["image_tokens"]), "prefill": (OBSERVATION, computed), **step}


class _Vision(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor) -> Tensor:
        return self.model.embed_images(images)


class _Prefill(nn.Module):
    def __init__(self, model: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, image_tokens: Tensor, language_tokens: Tensor, language_mask: Tensor, state: Tensor):
        obs = Observation(
            images=image_tokens, language_tokens=language_tokens, language_mask=language_mask, state=state
        )
        cache = self.model.prefill(obs, image_tokens)
        return tuple(getattr(cache, name) for name in self.names)


class _Step(nn.Module):
    """One action-head call with the cache rebuilt from its tensors (``decode``: one token of a decoder)."""

    def __init__(self, model: nn.Module, cache_type: type, names: list[str], decode: bool) -> None:
        super().__init__()
        self.model = model
        self.cache_type = cache_type
        self.names = names
        self.decode = decode

    def forward(self, *inputs: Tensor):
        head = 1 if self.decode else 2
        cache = self.cache_type(**dict(zip(self.names, inputs[head:], strict=True)))
        if self.decode:
            return self.model.decode_step(inputs[0], cache)
        return self.model.denoise_step(inputs[0], inputs[1], cache)


@dataclass(frozen=True)
class ExportedModel:
    folder: Path
    reused: bool
    graphs: dict[str, tuple[list[str], list[str]]]
    cache_class: str  # "module:Class" of the prefix cache the step graph reads

    def graph(self, name: str) -> Path:
        """Each graph has a folder of its own: large graphs keep weights as external-data files whose names
        (e.g. ``onnx__MatMul_4579``) could otherwise collide between graphs."""
        return self.folder / name / f"{name}.onnx"


def cache_root() -> Path:
    return Path(os.environ.get("VLABENCH_CACHE", Path.home() / ".cache" / "vlabench"))


def export_key(spec: ModelSpec, workload: Workload, precision: str, seed: int) -> str:
    """Everything the graphs depend on: spec, static shapes, precision, seed (weights), exporter versions."""
    identity = {
        "format": EXPORT_FORMAT,
        "spec": spec.spec_hash,
        "shapes": [workload.batch, workload.cameras, workload.language_tokens, workload.chunk],
        "precision": precision,
        "seed": seed,
        "torch": torch.__version__,
        "opset": OPSET,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def export_onnx(spec: ModelSpec, workload: Workload, precision: str, seed: int) -> ExportedModel:
    """Export (or reuse) the three graphs of ``spec`` at ``precision``; the folder is filled atomically."""
    try:
        import onnx  # noqa: F401  (the exporter needs it)
    except ImportError:
        raise UnavailableError("ONNX export needs the onnx package: pip install onnx") from None
    folder = cache_root() / "onnx" / f"{spec.name}-{precision}-{export_key(spec, workload, precision, seed)}"
    if (folder / "meta.json").exists():
        return _exported(folder, reused=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(folder.parent, ".partial-")
    try:
        graphs, cache_type = _export_into(staging, spec, workload, precision, seed)
        meta = {
            "graphs": graphs,
            "cache_class": f"{cache_type.__module__}:{cache_type.__qualname__}",
            "model": spec.name,
            "spec_hash": spec.spec_hash,
            "precision": precision,
            "seed": seed,
            "workload": workload.model_dump(),
            "opset": OPSET,
            "torch": torch.__version__,
        }
        (staging / "meta.json").write_text(json.dumps(meta, indent=2))
        if not publish_folder(staging, folder):
            return _exported(folder, reused=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if folder.exists() and not (folder / "meta.json").exists():
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return _exported(folder, reused=False)


def timed_export(spec: ModelSpec, workload: Workload, precision: str, seed: int) -> ExportedModel:
    """``export_onnx`` as the cold-start stage ``export`` (cached when the graphs were reused)."""
    with stage("export") as timed:
        exported = export_onnx(spec, workload, precision, seed)
        timed.cached = exported.reused
    return exported


def _exported(folder: Path, reused: bool) -> ExportedModel:
    meta = json.loads((folder / "meta.json").read_text())
    graphs = {name: (list(ins), list(outs)) for name, (ins, outs) in meta["graphs"].items()}
    return ExportedModel(folder, reused, graphs, meta["cache_class"])


def load_cache_class(path: str) -> type:
    module, name = path.split(":")
    return getattr(import_module(module), name)


@torch.no_grad()
def _export_into(
    folder: Path, spec: ModelSpec, workload: Workload, precision: str, seed: int
) -> tuple[dict[str, tuple[list[str], list[str]]], type]:
    cpu = torch.device("cpu")
    dtype = Precision.DTYPES[precision]
    with stage("load"):
        model = build_replica(spec, seed, dtype, cpu)
    obs = synthetic_observation(spec, workload, seed, dtype, cpu)
    image_tokens = model.embed_images(obs.images)
    cache = model.prefill(obs, image_tokens)
    graphs = graph_signatures(cache, obs, workload.action_loop)
    names = cache_fields(cache)
    tensors = [getattr(cache, name) for name in names]
    if "decode" in graphs:
        first = torch.zeros(workload.batch, 1, dtype=torch.long)
        step = ("decode", _Step(model, type(cache), names, decode=True), (first, *tensors))
    else:
        noise = initial_noise(workload, seed, dtype, cpu)
        t = torch.ones(workload.batch, dtype=torch.float32)
        step = ("denoise", _Step(model, type(cache), names, decode=False), (noise, t, *tensors))
    examples = {
        "vision": (_Vision(model), (obs.images,)),
        "prefill": (
            _Prefill(model, graphs["prefill"][1]),
            (image_tokens, obs.language_tokens, obs.language_mask, obs.state),
        ),
        step[0]: step[1:],
    }
    for name, (module, args) in examples.items():
        inputs, outputs = graphs[name]
        (folder / name).mkdir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                args,
                str(folder / name / f"{name}.onnx"),
                input_names=inputs,
                output_names=outputs,
                opset_version=OPSET,
                dynamo=False,
                do_constant_folding=True,
            )
    return graphs, type(cache)
