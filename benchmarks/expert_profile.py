"""Where the action expert's time goes at batch 1 on this CPU: one denoising step, by operator class, against the
roofline operator table (issue 19, section 3).

    python benchmarks/expert_profile.py [--model smolvla] [--cameras 3] [--threads 2] [--profiled-steps 20]
                                        [--variants torch:fp32 openvino:int8 torch-compile:int8+fuse-expert-kv ...]
                                        [--json-out FILE]

For each variant the step is first timed without a profiler (p50 over ``--timed-steps``), then profiled with the
runtime's own profiler: torch's (``torch.profiler``, the outermost aten and vlabench ops with their children; for
``torch-compile``, compiled with Inductor's per-kernel profiling, also each generated C++ kernel) or OpenVINO's
``PERF_COUNT`` (per executed node). Each op lands in one class:

- ``weight matmuls``: the projections and MLPs (torch ``aten::linear`` and the quantized kernels, vlabench's
  ``vlabench::amx_int8_linear``, OpenVINO
  ``FullyConnected`` and, after int8 PTQ, ``FullyConnectedQuantizedLegacy``); their floor is the roofline's for
  every operator but ``attention``;
- ``attention``: scores, softmax and mixing over the prefix cache and the chunk (``scaled_dot_product_attention``,
  vlabench's ``vlabench::amx_attention`` and ``avx512_attention``;
  OpenVINO fuses them into a ``Subgraph`` of four-dimensional inputs); floor: the ``attention`` rows;
- ``K/V expansion (GQA)``: copies of the cached keys and values expanded to the query heads: OpenVINO's ``Tile``
  in the exported graphs (eager torch reads the shared heads in place, SDPA's ``enable_gqa``, so its class is
  empty unless an op like ``repeat_interleave`` appears);
- ``layout and precision conversions``: OpenVINO ``Reorder`` / ``Convert`` / ``Transpose``;
- ``norms, activations, RoPE, residuals``: every other op (the roofline counts them as 0 FLOP, no floor), and every
  kernel Inductor generated (its pointwise and reduction kernels, named after the ops they feed);
- ``outside the ops``: the profiled step's wall time minus its ops (Python, dispatch, the profiler's own cost; for
  ``torch-compile`` also dynamo's guard checks and the compiled graph's wrapper between its kernels).

The two floored classes alone, at their measured times, bound the share of the floor the step can reach with the
runtime's matmul and attention kernels as they are (``floored_ops_ms``). A variant with ``+fuse-expert-kv`` (torch and
torch-compile) profiles the step on a cache that already holds the prefix K/V projections, and its floor leaves them
out (``backends.VARIANT_OPTIONS``).

The floors use ceilings measured once, at the start of the run, for every variant: the GEMM peak at each precision
profiled and one memory bandwidth (``kernels.ceilings``; this host's bandwidth drifts, and floors measured at
different moments made variants' shares incomparable). Wrap
with ``benchmarks/capture.py`` for a committed artifact with its provenance sidecar.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from time import perf_counter_ns

import torch
from rich.console import Console
from rich.table import Table

from vlabench.atomic import atomic_write_json
from vlabench.backends import BACKENDS, BackendOptions
from vlabench.hardware.detection import read_cpu_flags, read_cpu_model
from vlabench.kernels.ceilings import MeasuredCeiling, measure_ceilings
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import Precision

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backends import FLAGS_SHOWN, cpu_class, option_settings, parse_variant, step_roofline, variant_label

console = Console(width=160)
CPU = torch.device("cpu")
CLASSES = (
    "weight matmuls",
    "attention",
    "K/V expansion (GQA)",
    "layout and precision conversions",
    "norms, activations, RoPE, residuals",
    "outside the ops",
)
TORCH_CLASS = {
    "aten::linear": "weight matmuls",
    "aten::_weight_int4pack_mm_for_cpu": "weight matmuls",
    "aten::_int_mm": "weight matmuls",
    "aten::mm": "weight matmuls",  # a compiled graph's linears: Inductor lowers them to mm / addmm
    "aten::addmm": "weight matmuls",
    "vlabench::amx_int8_linear": "weight matmuls",
    "vlabench::vnni_int8_linear": "weight matmuls",
    "aten::scaled_dot_product_attention": "attention",
    "vlabench::amx_attention": "attention",
    "vlabench::avx512_attention": "attention",
    "aten::repeat_interleave": "K/V expansion (GQA)",
}
OPENVINO_CLASS = {
    "FullyConnected": "weight matmuls",
    "ScaledDotProductAttention": "attention",
    "MatMul": "attention",  # the CPU plugin turns every weight MatMul into FullyConnected
    "Softmax": "attention",
    "Tile": "K/V expansion (GQA)",
    "Reorder": "layout and precision conversions",
    "Convert": "layout and precision conversions",
    "Transpose": "layout and precision conversions",
}
FLOOR_CLASS = {"attention": "attention"}  # roofline operator name -> class; every other operator: weight matmuls
FLOORED = ("weight matmuls", "attention")
"""The classes the roofline floor counts. A step made of them alone, at their measured times, bounds the share of
the floor the step can reach while the runtime's own matmul and attention kernels stay as they are."""


PROFILER_NAMES = {
    "torch": "torch.profiler (CPU)",
    "torch-compile": "torch.profiler (CPU), Inductor kernels profiled",
    "openvino": "OpenVINO PERF_COUNT",
}
PROFILERS = tuple(PROFILER_NAMES)  # the backends whose own profiler this script reads
EXTERN_CALLS = ("mkldnn::", "mkl::", "aoti_torch_")
"""A compiled graph's calls of aten's kernels: Inductor's prepacked linears, and the C++ wrapper's calls
("aoti_torch_cpu__mkl_linear")."""
INDUCTOR_KERNEL = "cpp_fused"  # in the names of Inductor's generated C++ kernels (with cpp.enable_kernel_profile)


def profiled_variant(text: str) -> str:
    """A ``--variants`` entry whose backend this script can profile (its classes come from that profiler)."""
    name, _, options = parse_variant(text)
    if name not in PROFILERS:
        raise argparse.ArgumentTypeError(f"'{text}': only {', '.join(PROFILERS)} are profiled here")
    if "fuse-expert-kv" in options and not BACKENDS[name].fuses_expert_kv:
        fusing = ", ".join(backend for backend in PROFILERS if BACKENDS[backend].fuses_expert_kv)
        raise argparse.ArgumentTypeError(f"'{text}': +fuse-expert-kv applies to {fusing}")
    return text


def torch_class(name: str) -> str:
    if name in TORCH_CLASS:
        return TORCH_CLASS[name]
    if INDUCTOR_KERNEL in name:  # named after the ops it feeds ("..._vnni_int8_linear_2"), but itself pointwise
        return "norms, activations, RoPE, residuals"
    if "scaled_dot_product" in name:  # the compiled graphs call SDPA's CPU kernels by their own names
        return "attention"
    if name.startswith(EXTERN_CALLS) and ("linear" in name or name.endswith("mm")):  # linears, mm / addmm
        return "weight matmuls"
    if "quantize" in name or "int8" in name or "_mm" in name:
        return "weight matmuls"
    return "norms, activations, RoPE, residuals"


def step_inputs(policy, spec, workload, precision: str, seed: int):
    dtype = Precision.dtype(precision)
    obs = synthetic_observation(spec, workload, seed, dtype, CPU)
    with torch.inference_mode():
        cache = policy.prefix(obs)
    x_t = initial_noise(workload, seed, dtype, CPU)
    t = torch.full((workload.batch,), 0.5)  # fp32, as the action loops' times (a compiled step is compiled for them)
    return x_t, t, cache


def timed_steps(policy, x_t, t, cache, count: int) -> list[float]:
    """Milliseconds per denoising step, no profiler attached."""
    times = []
    with torch.inference_mode():
        for _ in range(count):
            begin = perf_counter_ns()
            policy.denoise_step(x_t, t, cache)
            policy.synchronize()
            times.append((perf_counter_ns() - begin) / 1e6)
    return times


def is_op(name: str) -> bool:
    return name.startswith(("aten::", "vlabench::", *EXTERN_CALLS)) or INDUCTOR_KERNEL in name


def outermost_op(event) -> bool:
    """An op none of whose callers is an op (a compiled graph's ops sit under its "Call CompiledFxGraph" event)."""
    parent = event.cpu_parent
    while parent is not None:
        if is_op(parent.name):
            return False
        parent = parent.cpu_parent
    return is_op(event.name)


def profile_torch(policy, x_t, t, cache, count: int) -> tuple[dict[str, float], float]:
    """Per class, milliseconds per step of the outermost aten and vlabench ops and Inductor kernels (children
    included); and the profiled wall."""
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        begin = perf_counter_ns()
        for _ in range(count):
            policy.denoise_step(x_t, t, cache)
        wall_ms = (perf_counter_ns() - begin) / 1e6
    classes: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if outermost_op(event):
            classes[torch_class(event.name)] += event.cpu_time_total / 1e3
    return classes, wall_ms


def openvino_class(op_type: str, name: str, fused_attention: set[str]) -> str:
    """The class of an executed OpenVINO node; ``fused_attention``: the ``Subgraph`` nodes into which the CPU
    plugin fused an attention (MatMul, Softmax, MatMul), named after whichever op came first."""
    if op_type == "Subgraph" and name in fused_attention:
        return "attention"
    if op_type.startswith("FullyConnected"):  # FullyConnectedQuantizedLegacy: int8 PTQ's dequantized variant
        return "weight matmuls"
    return OPENVINO_CLASS.get(op_type, "norms, activations, RoPE, residuals")


def fused_attention_nodes(policy, graph: str) -> set[str]:
    """The compiled graph's ``Subgraph`` nodes that take queries, keys, a mask and values: four-dimensional
    (batch, heads, tokens, width) inputs, three or more of them."""
    runtime = policy.requests[graph].get_compiled_model().get_runtime_model()
    found = set()
    for op in runtime.get_ops():
        ranks = [op.get_input_partial_shape(i).rank.get_length() for i in range(op.get_input_size())]
        if op.get_rt_info()["layerType"].astype(str) == "Subgraph" and len(ranks) >= 3 and set(ranks) == {4}:
            found.add(op.get_friendly_name())
    return found


def profile_runtime(policy, x_t, t, cache, count: int, graph: str) -> tuple[dict[str, float], float, int]:
    """Per class, milliseconds of the runtime's own node timings for ``graph`` over ``count`` steps; the profiled
    wall; and how many node events were counted (those of these steps alone)."""
    recorded_before = len(policy.node_events())  # the prefix and the timed steps were recorded too
    with torch.inference_mode():
        begin = perf_counter_ns()
        for _ in range(count):
            policy.denoise_step(x_t, t, cache)
        wall_ms = (perf_counter_ns() - begin) / 1e6
    classes: dict[str, float] = defaultdict(float)
    attention = fused_attention_nodes(policy, graph)
    events = [event for event in policy.node_events()[recorded_before:] if event.graph == graph]
    for event in events:
        classes[openvino_class(event.op_type, event.name, attention)] += (event.end_ns - event.start_ns) / 1e6
    return classes, wall_ms, len(events)


def floors(
    spec, workload, precision: str, step_ms: float, measured: list[MeasuredCeiling], hoisted: bool = False
) -> dict[str, float | None]:
    """Per class, the roofline floor of one denoising step on the run's measured ceilings (ms); ``hoisted``: without
    the prefix K/V projections (``+fuse-expert-kv``)."""
    report = step_roofline(spec, workload, precision, step_ms, measured, top_operators=10_000, hoisted=hoisted)
    found: dict[str, float | None] = defaultdict(float)
    for op in (o for o in report.operators if o.phase == "denoise_step"):
        kind = FLOOR_CLASS.get(op.name, "weight matmuls")
        found[kind] = None if op.floor_ms is None or found[kind] is None else found[kind] + op.floor_ms
    step = next(p for p in report.phases if p.phase == "denoise_step")
    found["step"] = step.share_of_attainable * step_ms if step.share_of_attainable else None
    return dict(found)


def profile_variant(
    name: str, precision: str, args, spec, workload, measured: list[MeasuredCeiling], options: tuple[str, ...] = ()
) -> dict:
    from torch._inductor import config as inductor_config

    settings = option_settings(options)
    backend = BACKENDS[name].from_options(BackendOptions(profile_nodes=name == "openvino", **settings))
    with inductor_config.patch({"cpp.enable_kernel_profile": name == "torch-compile"}):
        policy = backend.prepare(spec, workload, CPU, precision, args.seed)
    x_t, t, cache = step_inputs(policy, spec, workload, precision, args.seed)
    timed_steps(policy, x_t, t, cache, 3)  # warm-up
    step_ms = statistics.median(timed_steps(policy, x_t, t, cache, args.timed_steps))
    if name == "openvino":
        classes, wall, _ = profile_runtime(policy, x_t, t, cache, args.profiled_steps, "denoise")
    else:
        classes, wall = profile_torch(policy, x_t, t, cache, args.profiled_steps)
    per_step = {kind: ms / args.profiled_steps for kind, ms in classes.items()}
    per_step["outside the ops"] = max(wall / args.profiled_steps - sum(per_step.values()), 0.0)
    floor = floors(spec, workload, precision, step_ms, measured, hoisted="fuse-expert-kv" in options)
    floored_ms = sum(per_step.get(kind, 0.0) for kind in FLOORED)
    return {
        "variant": variant_label(name, precision, options),
        "step_p50_ms": step_ms,
        "profiled_step_ms": wall / args.profiled_steps,
        "step_floor_ms": floor.get("step"),
        "floored_ops_ms": floored_ms,
        "classes": {kind: {"ms": per_step.get(kind, 0.0), "floor_ms": floor.get(kind)} for kind in CLASSES},
        "profiler": PROFILER_NAMES[name],
    }


def show(records: list[dict]) -> None:
    for rec in records:
        floor = rec["step_floor_ms"]
        title = (
            f"{rec['variant']}: one denoising step {rec['step_p50_ms']:.1f} ms p50 (profiled "
            f"{rec['profiled_step_ms']:.1f} ms)"
            + (f", roofline floor {floor:.1f} ms = {floor / rec['step_p50_ms']:.0%}" if floor else "")
        )
        if floor:
            title += f"; with only its weight matmuls and attention: {floor / rec['floored_ops_ms']:.0%}"
        table = Table(title=title)
        for column in ("class", "ms per step", "share of profiled step", "floor ms", "floor / measured"):
            table.add_column(column, justify="left" if column == "class" else "right")
        for kind, entry in rec["classes"].items():
            share = entry["ms"] / rec["profiled_step_ms"]
            floor_ms = entry["floor_ms"]
            table.add_row(
                kind,
                f"{entry['ms']:.2f}",
                f"{share:.0%}",
                f"{floor_ms:.2f}" if floor_ms else "—",
                f"{floor_ms / entry['ms']:.0%}" if floor_ms and entry["ms"] else "—",
            )
        console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smolvla")
    parser.add_argument("--cameras", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--variants", nargs="+", type=profiled_variant, default=["torch:fp32", "torch:bf16", "openvino:bf16"]
    )
    parser.add_argument("--timed-steps", type=int, default=20)
    parser.add_argument("--profiled-steps", type=int, default=10)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    flags = read_cpu_flags()
    console.print(
        f"CPU: {read_cpu_model()} ({cpu_class(flags)}); flags: {' '.join(f for f in FLAGS_SHOWN if f in flags)}"
    )
    console.print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    spec = load_model_spec(args.model)
    workload = Workload.from_spec(spec, args.cameras)
    parsed = [parse_variant(variant) for variant in args.variants]
    measured = measure_ceilings(CPU, tuple(dict.fromkeys(precision for _, precision, _ in parsed)))
    bandwidth = next(c for c in measured if c.quantity == "memory_bandwidth")
    console.print(f"memory bandwidth (every variant's floor): {bandwidth.value:.1f} GB/s ({bandwidth.detail})")
    records = []
    for name, precision, options in parsed:
        records.append(profile_variant(name, precision, args, spec, workload, measured, options))
    show(records)
    console.print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json_out:
        artifact = {
            "kind": "expert-profile",
            "model": args.model,
            "workload": workload.model_dump(mode="json"),
            "threads": args.threads,
            "cpu": {
                "model": read_cpu_model(),
                "class": cpu_class(flags),
                "flags": [f for f in FLAGS_SHOWN if f in flags],
            },
            "memory_bandwidth_gbs": bandwidth.value,
            "variants": records,
        }
        atomic_write_json(args.json_out, artifact)


if __name__ == "__main__":
    main()
