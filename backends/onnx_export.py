"""Export a replica's phases to three static-shape ONNX graphs, cached on disk.

vision:  images -> image_tokens
prefill: image_tokens, language_tokens, language_mask, state -> keys, values, valid   (per-layer prefix K/V)
denoise: x_t, t, keys, values, valid, state -> velocity                                (one Euler step)

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
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from vlabench.backends.base import PRECISIONS
from vlabench.errors import UnavailableError
from vlabench.replicas import FlowMatchingVLA, Observation, PrefixCache, build_replica
from vlabench.specs import ModelSpec
from vlabench.workload import Workload, initial_noise, synthetic_observation

OPSET = 18
EXPORT_FORMAT = "vlabench-onnx-4"  # bump when graph boundaries or names change
GRAPHS = {
    "vision": (["images"], ["image_tokens"]),
    "prefill": (["image_tokens", "language_tokens", "language_mask", "state"], ["keys", "values", "valid"]),
    "denoise": (["x_t", "t", "keys", "values", "valid", "state"], ["velocity"]),
}


class _Vision(nn.Module):
    def __init__(self, model: FlowMatchingVLA) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor) -> Tensor:
        return self.model.embed_images(images)


class _Prefill(nn.Module):
    def __init__(self, model: FlowMatchingVLA) -> None:
        super().__init__()
        self.model = model

    def forward(self, image_tokens: Tensor, language_tokens: Tensor, language_mask: Tensor, state: Tensor):
        obs = Observation(
            images=image_tokens, language_tokens=language_tokens, language_mask=language_mask, state=state
        )
        cache = self.model.prefill(obs, image_tokens)
        return cache.keys, cache.values, cache.valid


class _Denoise(nn.Module):
    def __init__(self, model: FlowMatchingVLA) -> None:
        super().__init__()
        self.model = model

    def forward(self, x_t: Tensor, t: Tensor, keys: Tensor, values: Tensor, valid: Tensor, state: Tensor) -> Tensor:
        return self.model.denoise_step(x_t, t, PrefixCache(keys=keys, values=values, valid=valid, state=state))


@dataclass(frozen=True)
class ExportedModel:
    folder: Path
    reused: bool

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
        return ExportedModel(folder, reused=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".partial-"))
    try:
        _export_into(staging, spec, workload, precision, seed)
        meta = {
            "model": spec.name,
            "spec_hash": spec.spec_hash,
            "precision": precision,
            "seed": seed,
            "workload": workload.model_dump(),
            "opset": OPSET,
            "torch": torch.__version__,
        }
        (staging / "meta.json").write_text(json.dumps(meta, indent=2))
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if folder.exists() and not (folder / "meta.json").exists():
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return ExportedModel(folder, reused=False)


@torch.no_grad()
def _export_into(folder: Path, spec: ModelSpec, workload: Workload, precision: str, seed: int) -> None:
    cpu = torch.device("cpu")
    dtype = PRECISIONS[precision]
    model = build_replica(spec, seed, dtype, cpu)
    obs = synthetic_observation(spec, workload, seed, dtype, cpu)
    image_tokens = model.embed_images(obs.images)
    cache = model.prefill(obs, image_tokens)
    noise = initial_noise(workload, seed, dtype, cpu)
    t = torch.ones(workload.batch, dtype=torch.float32)
    examples = {
        "vision": (_Vision(model), (obs.images,)),
        "prefill": (_Prefill(model), (image_tokens, obs.language_tokens, obs.language_mask, obs.state)),
        "denoise": (_Denoise(model), (noise, t, cache.keys, cache.values, cache.valid, cache.state)),
    }
    for name, (module, args) in examples.items():
        inputs, outputs = GRAPHS[name]
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
