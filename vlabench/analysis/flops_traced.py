"""FLOPs and bytes of any replica, counted by running its phases on the meta device (nothing is allocated).

Every aten operator that ``torch.utils.flop_counter`` has a formula for (matrix products, convolutions, attention)
becomes one ``Operator``, with the same conventions as the analytic counts of ``vlabench.analysis.flops``: its FLOPs
from that formula; its weight bytes from the inputs that are (views of) parameters; its K/V-cache bytes from inputs
that are the cache's tensors; everything else it reads or writes as activations. Gathered embedding rows count as
weights. The flow-matching VLAs keep their analytic counts (cross-checked against this kind of trace in the tests).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from vlabench.analysis.operators import Operator
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import ModelPhase, Precision

VIEWS = {
    torch.ops.aten.t,
    torch.ops.aten.view,
    torch.ops.aten._unsafe_view,
    torch.ops.aten.transpose,
    torch.ops.aten.permute,
    torch.ops.aten.expand,
    torch.ops.aten.select,
    torch.ops.aten.slice,
    torch.ops.aten.unsqueeze,
    torch.ops.aten.squeeze,
    torch.ops.aten.reshape,
    torch.ops.aten.alias,
    torch.ops.aten.detach,
    torch.ops.aten._to_copy,
    torch.ops.aten.clone,
    torch.ops.aten.contiguous,
}
GATHERS = {torch.ops.aten.embedding, torch.ops.aten.index_select}


class _Recorder(TorchDispatchMode):
    """Records counted operators; tracks which tensors derive from weights or from the K/V cache."""

    def __init__(self, weights: list[torch.Tensor], element: int) -> None:
        super().__init__()
        self.kind: dict[int, str] = {id(w): "weight" for w in weights}
        self.alive: list[Any] = list(weights)  # keeps ids unique while the trace runs
        self.element = element
        self.phase: ModelPhase = "vision"
        self.ops: list[Operator] = []

    def mark(self, tensors: list[torch.Tensor], kind: str) -> None:
        for tensor in tensors:
            self.kind[id(tensor)] = kind
            self.alive.append(tensor)

    def _bytes(self, tensor: torch.Tensor) -> float:
        return float(tensor.numel() * self.element)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        source = next((self.kind[id(a)] for a in inputs if id(a) in self.kind), None)
        if packet in VIEWS and source is not None:
            self.mark(outputs, source)
        elif packet in GATHERS and inputs and id(inputs[0]) in self.kind:
            self._record(packet, 0.0, {"weight": sum(map(self._bytes, outputs))}, outputs)
        elif packet in flop_registry:
            flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            split: dict[str, float] = {}
            for tensor in inputs:
                kind = self.kind.get(id(tensor), "activation")
                split[kind] = split.get(kind, 0.0) + self._bytes(tensor)
            split["activation"] = split.get("activation", 0.0) + sum(map(self._bytes, outputs))
            self._record(packet, flops, split, outputs)
        return out

    def _record(self, packet, flops: float, split: dict[str, float], outputs: list[torch.Tensor]) -> None:
        self.ops.append(
            Operator(
                phase=self.phase,
                block=self.phase,
                layer=None,
                name=str(packet).removeprefix("aten."),
                flops=flops,
                weight_bytes=split.get("weight", 0.0),
                activation_bytes=split.get("activation", 0.0),
                kv_read_bytes=split.get("cache", 0.0),
            )
        )


_TRACED: dict[tuple[str, str, str], list[Operator]] = {}


def trace_operators(spec: ModelSpec, workload: Workload, precision: str) -> list[Operator]:
    """Operators of the vision phase, the prefill and one action step (a denoising step, a decode step, or the
    single pass), in execution order; traced once per (spec, workload, precision) in a process."""
    key = (spec.spec_hash, workload.model_dump_json(), precision)
    if key not in _TRACED:
        _TRACED[key] = _trace(spec, workload, precision)
    return list(_TRACED[key])


@torch.no_grad()
def _trace(spec: ModelSpec, workload: Workload, precision: str) -> list[Operator]:
    from vlabench.models.replicas import replica_class

    dtype, meta = Precision.dtype(precision), torch.device("meta")  # quantized: fp32 activations
    with meta:
        model = replica_class(spec)(spec).to(dtype)
    obs = synthetic_observation(spec, workload, 0, dtype, torch.device("cpu"))
    obs = type(obs)(**{name: value.to(meta) for name, value in vars(obs).items()})
    noise = initial_noise(workload, 0, dtype, meta)
    recorder = _Recorder([*model.parameters()], Precision.BYTES[precision])
    with recorder:
        tokens = model.embed_images(obs.images)
        recorder.phase = "prefill"
        cache = model.prefill(obs, tokens)
        recorder.mark([value for value in vars(cache).values() if isinstance(value, torch.Tensor)], "cache")
        recorder.phase = "denoise_step"
        if workload.action_loop == "greedy_decode":
            model.decode_step(torch.zeros(workload.batch, 1, dtype=torch.long, device=meta), cache)
        else:
            model.denoise_step(noise, torch.ones(workload.batch, device=meta), cache)
    return recorder.ops
