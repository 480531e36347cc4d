"""vlabench's int8 linear (its AMX or its AVX512-VNNI path) against torchao's dynamic int8 linear
(``torch._int_mm``), one whole Linear call each (activation quantization, int8 matmul, rescale), at the SmolVLA
action expert's Linear shapes, batch 1.

    python benchmarks/amx_linear.py [--model smolvla] [--threads 2] [--path amx|vnni] [--json-out FILE]

``--path`` is the kernel's path to time (default: the first of amx, vnni that runs on this CPU; the report's
``kernel``, and the prefix of its per-scheme keys).

Each shape is timed twice per scheme, interleaved: ``hot`` calls one weight again and again (it stays in cache),
``cold`` walks a set of distinct weights of that shape totalling over ``--cold-mib`` MiB, so each call streams its
weight from memory, as a denoising step does (the expert's int8 weights outgrow the caches). Medians over
``--repeats`` rounds of ``--calls`` calls. Wrap with ``benchmarks/capture.py`` for a committed artifact.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from time import perf_counter

import torch
from rich.console import Console
from rich.table import Table
from torch import nn

from vlabench.atomic import atomic_write_json
from vlabench.backends.torch.quantize import Quantizer
from vlabench.hardware.detection import read_cpu_flags, read_cpu_model
from vlabench.hardware.isa_cap import CAPS, emulation_entry, run_capped
from vlabench.kernels import amx_int8
from vlabench.models.replicas import build_replica
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backends import FLAGS_SHOWN

CPU = torch.device("cpu")


def expert_shapes(model: str) -> tuple[int, list[tuple[int, int]]]:
    """(rows per call = the action chunk, the distinct (in, out) widths of the expert's Linear layers)."""
    spec = load_model_spec(model)
    workload = Workload.from_spec(spec)
    replica = build_replica(spec, 0, torch.float32, CPU)
    widths = {(m.in_features, m.out_features) for m in replica.expert.modules() if isinstance(m, nn.Linear)}
    return workload.suffix_tokens, sorted(widths)


def per_call_ms(layers: list[nn.Module], x: torch.Tensor, calls: int) -> float:
    """Milliseconds per call, cycling through ``layers``."""
    with torch.inference_mode():
        begin = perf_counter()
        for i in range(calls):
            layers[i % len(layers)](x)
        return (perf_counter() - begin) / calls * 1e3


def build(scheme: str, width: tuple[int, int], count: int) -> list[nn.Module]:
    quantizer = Quantizer(CPU, "int8", scheme)
    return [quantizer(f"layer{i}", nn.Linear(*width)) for i in range(count)]


def measure(rows: int, width: tuple[int, int], args) -> dict:
    count = max(2, int(args.cold_mib * 2**20 // (width[0] * width[1])))
    x = torch.randn(rows, width[0])
    kernel = args.path
    layers = {scheme: build(scheme, width, count) for scheme in (kernel, "torchao")}
    runs: dict[str, list[float]] = {f"{s} {k}": [] for s in layers for k in ("hot", "cold")}
    for built in layers.values():  # warm-up: first calls, the kernel build, page faults
        per_call_ms(built, x, count)
    for _ in range(args.repeats):
        for scheme, built in layers.items():
            runs[f"{scheme} hot"].append(per_call_ms(built[:1], x, args.calls))
            runs[f"{scheme} cold"].append(per_call_ms(built, x, max(args.calls, count)))
    medians = {key: statistics.median(values) for key, values in runs.items()}
    ops = 2 * rows * width[0] * width[1]
    return {
        "rows": rows,
        "in_features": width[0],
        "out_features": width[1],
        "distinct_weights_cold": count,
        "ms": medians,
        "spread_ms": {key: [min(v), max(v)] for key, v in runs.items()},
        f"{kernel}_speedup": {k: medians[f"torchao {k}"] / medians[f"{kernel} {k}"] for k in ("hot", "cold")},
        f"{kernel}_top_s": {k: ops / medians[f"{kernel} {k}"] / 1e9 for k in ("hot", "cold")},
        f"{kernel}_cold_weight_gb_s": width[0] * width[1] / medians[f"{kernel} cold"] / 1e6,
    }


def show(records: list[dict], kernel: str, console: Console) -> None:
    table = Table(title=f"one int8 Linear call, ms (median): vlabench kernel ({kernel}) vs torchao dynamic int8")
    columns = (f"{kernel} hot", "torchao hot", "× hot", f"{kernel} cold", "torchao cold", "× cold", "TOP/s")
    for column in ("rows×in→out", *columns):
        table.add_column(column, justify="right")
    for r in records:
        ms, speedup = r["ms"], r[f"{kernel}_speedup"]
        table.add_row(
            f"{r['rows']}×{r['in_features']}→{r['out_features']}",
            *(f"{ms[k]:.3f}" for k in (f"{kernel} hot", "torchao hot")),
            f"{speedup['hot']:.2f}×",
            *(f"{ms[k]:.3f}" for k in (f"{kernel} cold", "torchao cold")),
            f"{speedup['cold']:.2f}×",
            f"{r[f'{kernel}_top_s']['cold']:.2f}",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smolvla")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cold-mib", type=float, default=192.0)
    parser.add_argument("--path", choices=tuple(amx_int8.ISAS), help="the kernel's path (default: the first that runs)")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument(
        "--max-cpu-isa",
        choices=tuple(CAPS),
        default=None,
        help="emulate a lesser CPU class: vlabench and torchao's oneDNN capped to it; the artifact says so",
    )
    args = parser.parse_args(argv)
    run_capped(args.max_cpu_isa)
    console = Console(width=140)
    reasons = {isa: amx_int8.unavailable_reason(isa) for isa in ((args.path,) if args.path else amx_int8.ISAS)}
    args.path = next((isa for isa, reason in reasons.items() if reason is None), None)
    if args.path is None:
        console.print(f"[red]error:[/red] {'; '.join(reasons.values())}")
        return 3
    torch.set_num_threads(args.threads)
    flags = sorted(set(FLAGS_SHOWN) & read_cpu_flags())
    console.print(f"{read_cpu_model()}, {args.threads} threads; flags {' '.join(flags)}")
    rows, widths = expert_shapes(args.model)
    records = [measure(rows, width, args) for width in widths]
    show(records, args.path, console)
    if args.json_out:
        report = {
            "kind": "amx-linear",
            "kernel": args.path,
            "model": args.model,
            "threads": args.threads,
            "cpu": {"model": read_cpu_model(), "flags": flags, **emulation_entry()},
            "shapes": records,
        }
        atomic_write_json(args.json_out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
