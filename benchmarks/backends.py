"""Every backend variant side by side on this host's CPU, in one run: per-phase p50, speed-up over eager torch fp32,
the action expert's share of its roofline floor, and each variant's action error against the fp32 reference.

    python benchmarks/backends.py [--model smolvla] [--cameras 3] [--steps 10] [--threads 2]
                                  [--variants torch:fp32 torch:bf16 torch-compile:int8+fuse-expert-kv ...]
                                  [--min-iterations 5] [--min-duration 20] [--out results/benchmarks] [--json-out FILE]

The variants are every (backend, precision) a backend declares on the CPU (torch eager, torch-compile with
Inductor's CPU inference settings, ONNX Runtime, OpenVINO; fp32, bf16, fp16, int8, int4 as each supports them); one
the CPU does not run natively (bf16 without AVX512-BF16/AMX, int8 without VNNI/AMX) or a backend unavailable here is
listed as skipped with the reason. A requested variant may add lossless options (``+fuse-expert-kv``,
``VARIANT_OPTIONS``), its expert floor then counting only the work left in a step. The variants run interleaved in
one child process when they fit in memory together, else in groups that do, each led by eager torch fp32 (a
speed-up is always over the eager fp32 timed in the same process, interleaved with it); a variant that crashes is
named and the others are still reported. GEMM peak (per precision) and memory bandwidth are measured once, first,
and every variant's roofline floor rests on them (this host's bandwidth drifts: a reading per variant gave floors up
to 2x apart on the same weights). Targets checked
(issue 19): on a CPU with AMX the best variant within the gate >= 4.5x eager fp32 end to end and the action expert
at >= 60% of its roofline floor; on a CPU without native bf16, >= 2x through int8. Wrap with
``benchmarks/capture.py`` (``--json-out``) for a committed artifact with its provenance sidecar.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from vlabench.analysis.roofline import RooflineReport, analyze, ceilings_for
from vlabench.atomic import atomic_write_json
from vlabench.backends import BACKENDS
from vlabench.commands.run import RunPlan, check_fit_together, check_paths, execute_runs, plan_run
from vlabench.commands.run.precision_auto import CPU_FLAGS, native_reason
from vlabench.config import RunConfig
from vlabench.errors import InsufficientMemoryError, VlabenchError
from vlabench.hardware.detection import read_cpu_flags, read_cpu_model
from vlabench.hardware.devices import resolve_device
from vlabench.hardware.isa_cap import CAPS, ENV, active_cap, emulation_entry, recorded_caps, run_capped
from vlabench.kernels.ceilings import MeasuredCeiling, measure_ceilings
from vlabench.models.specs import ModelSpec, load_model_spec
from vlabench.models.workload import Workload
from vlabench.results.schema import RunResult, write_result
from vlabench.vocab import Precision

console = Console(width=180)
CPU = torch.device("cpu")
CPU_BACKENDS = ("torch", "torch-compile", "onnxruntime", "openvino", "tensorrt")
BASELINE = ("torch", "fp32")  # eager torch fp32: every speed-up is over it
VARIANT_OPTIONS = {"fuse-expert-kv": "fuse_expert_kv"}
"""``+option`` suffixes a variant may carry -> the run setting each turns on (lossless: the gate still applies)."""
PHASES = ("vision", "prefill", "denoise_step", "action", "e2e")
FLAGS_SHOWN = sorted({"avx2", "avx512f", "amx_tile", *(flag for flags in CPU_FLAGS.values() for flag in flags)})
TARGETS = {"amx": (4.5, 0.60), "no-native-bf16": (2.0, None)}
"""CPU class → (end-to-end speed-up of the best valid variant over eager fp32, expert share of its floor)."""


UNCAPPED = {"onnxruntime": "its MLAS kernels have no ISA cap, so they would run this CPU's full instruction set"}
"""Backends whose kernels ignore the ISA caps (``--max-cpu-isa``): left out of an emulated run, with why."""


def cpu_class(flags: set[str]) -> str:
    """``amx``, ``avx512-bf16`` (native bf16 without AMX) or ``no-native-bf16``."""
    if "amx_bf16" in flags:
        return "amx"
    return "avx512-bf16" if "avx512_bf16" in flags else "no-native-bf16"


def parse_variant(text: str) -> tuple[str, str, tuple[str, ...]]:
    """A ``--variants`` entry, ``backend:precision`` with optional ``+option`` suffixes, as (backend, precision,
    options); anything else is a usage error naming the valid parts."""
    pair, *options = text.split("+")
    name, _, precision = pair.partition(":")
    if name not in CPU_BACKENDS or precision not in Precision.NAMES:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not backend:precision with a backend among {', '.join(CPU_BACKENDS)} and a precision "
            f"among {', '.join(Precision.NAMES)}"
        )
    unknown = [option for option in options if option not in VARIANT_OPTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"'{text}': no variant option '{unknown[0]}' (the options are +{', +'.join(VARIANT_OPTIONS)})"
        )
    return name, precision, tuple(options)


def variant_name(text: str) -> str:
    """A valid ``--variants`` entry as given (``parse_variant`` checks it), for argparse."""
    parse_variant(text)
    return text


def option_settings(options: tuple[str, ...]) -> dict[str, bool]:
    """The run settings that ``options`` (``VARIANT_OPTIONS`` names) turn on."""
    return {VARIANT_OPTIONS[option]: True for option in options}


def enabled_options(settings: object | None) -> tuple[str, ...]:
    """The ``VARIANT_OPTIONS`` turned on in ``settings`` (a run's config or its result's optimization block)."""
    return tuple(option for option, field in VARIANT_OPTIONS.items() if settings and getattr(settings, field))


def variant_label(backend: str, precision: str, options: tuple[str, ...] = ()) -> str:
    """How a variant is named in the table and the artifact: "torch-compile int8 +fuse-expert-kv"."""
    return " ".join([backend, precision, *(f"+{option}" for option in options)])


def result_options(result: RunResult) -> tuple[str, ...]:
    """The ``VARIANT_OPTIONS`` a run had on."""
    return enabled_options(result.optimization)


def variants(requested: list[str] | None) -> tuple[list[tuple[str, str, tuple[str, ...]]], list[str]]:
    """(backend, precision, options) to run on the CPU, and the skipped ones with why (a requested pair the backend
    does not offer here among them). A pair requested with options runs once per entry naming it."""
    chosen, skipped = [], []
    wanted: dict[str, list[tuple[str, ...]]] = {}
    for entry in requested or []:
        name, precision, options = parse_variant(entry)
        wanted.setdefault(f"{name}:{precision}", []).append(options)
    for name in CPU_BACKENDS:
        backend = BACKENDS[name]()
        reason = backend.unavailable_reason(CPU)
        if reason is None and "cpu" not in backend.engines:
            reason = "it does not execute on the CPU"
        if reason is None and active_cap() and name in UNCAPPED:
            reason = f"not run under {ENV}={active_cap()}: {UNCAPPED[name]}"
        if reason:
            skipped.append(f"{name}: {reason}")
            continue
        for precision in (p for p in Precision.NAMES if p in backend.precisions(CPU)):
            if requested and f"{name}:{precision}" not in wanted:
                continue
            why = native_reason(precision, "cpu")
            if why:
                skipped.append(f"{name} {precision}: {why}")
            else:
                chosen += [(name, precision, options) for options in wanted.get(f"{name}:{precision}", [()])]
    offered = {f"{name}:{precision}" for name, precision, _ in chosen}
    for pair in wanted:
        name, _, precision = pair.partition(":")
        if pair not in offered and not any(s.startswith((f"{name}:", f"{name} {precision}:")) for s in skipped):
            skipped.append(f"{name} {precision}: the backend does not offer it on this CPU")
    return chosen, skipped


def fitting_groups(plans: list[RunPlan]) -> list[list[RunPlan]]:
    """All the plans in one group when they fit in memory together; else groups that do, each led by the baseline
    (the first plan), so every variant is timed interleaved with eager fp32 in one process and its speed-up does
    not drift with the machine. A variant that does not fit beside the baseline runs alone."""
    try:
        check_fit_together(plans)
        return [plans]
    except InsufficientMemoryError:
        pass
    baseline, groups, current = plans[0], [], [plans[0]]
    for plan in plans[1:]:
        try:
            check_fit_together([*current, plan])
            current.append(plan)
            continue
        except InsufficientMemoryError:
            pass
        if len(current) > 1:
            groups.append(current)
        try:
            check_fit_together([baseline, plan])
            current = [baseline, plan]
        except InsufficientMemoryError:
            groups.append([plan])
            current = [baseline]
    if len(current) > 1:
        groups.append(current)
    return groups


def run_variants(configs: list[RunConfig]) -> tuple[list[list[RunResult]], list[str], list[str]]:
    """Plan every variant (refusals become skips), then run each group of ``fitting_groups`` interleaved in a child
    of its own: the results per group, the skipped variants and the crashed ones (named, with their signal)."""
    plans: list[RunPlan] = []
    skipped = []
    for config in configs:
        try:
            plans.append(plan_run(config))
        except VlabenchError as exc:
            skipped.append(f"{config_label(config)}: {exc}")
    groups = fitting_groups(plans) if plans else []
    if len(groups) > 1:
        console.print(
            f"[yellow]the variants do not fit in memory together: {len(groups)} groups, each timed interleaved "
            "with eager torch fp32[/]"
        )
    results, crashed = [], []
    for group in groups:
        outcome = execute_runs(group, announce=console.print, isolate=True)
        results.append(outcome.results)
        crashed += [crash.message for crash in outcome.crashes]
    return results, skipped, crashed


def config_label(config: RunConfig) -> str:
    return variant_label(config.backend, config.precision, enabled_options(config))


def step_roofline(
    spec: ModelSpec,
    workload: Workload,
    precision: str,
    step_ms: float,
    measured: list[MeasuredCeiling],
    top_operators: int = 12,
    hoisted: bool = False,
) -> RooflineReport:
    """One denoising step of ``step_ms`` against the ceilings ``measured`` once for a whole benchmark, only those
    (never the profile's datasheet figures): without them, no floor and no share. ``hoisted``: the step runs with
    ``+fuse-expert-kv``, so its floor leaves out the prefix K/V projections done once in the prefill."""
    profile = resolve_device("cpu").profile
    ceilings = [c for c in ceilings_for(profile, precision, measured) if c.source == "measured"]
    phases = {"denoise_step": step_ms}
    return analyze(
        spec, workload, precision, profile.name, ceilings, phases, top_operators=top_operators, hoisted=hoisted
    )


def expert_share(result: RunResult, measured: list[MeasuredCeiling]) -> float | None:
    """The action expert's (one denoising step's) roofline floor on the ceilings ``measured`` once for the whole
    benchmark, over the step's p50; None without them."""
    step = result.timing.phases.get("denoise_step")
    if step is None:
        return None
    spec = load_model_spec(result.model.name)
    hoisted = "fuse-expert-kv" in result_options(result)
    report = step_roofline(spec, result.workload, result.precision, step.p50, measured, hoisted=hoisted)
    phase = next((p for p in report.phases if p.phase == "denoise_step"), None)
    return phase.share_of_attainable if phase else None


def beats_its_floor(share: float | None) -> bool:
    """A step faster than its roofline floor, which no run can be: a ceiling of that run was read low, so the
    share overstates; it is flagged and counts toward no target."""
    return share is not None and share > 1.0


def is_baseline(result: RunResult) -> bool:
    return (result.backend, result.precision) == BASELINE and not result_options(result)


def rows(groups: list[list[RunResult]], measured: list[MeasuredCeiling]) -> list[dict]:
    """One record per variant: phase p50s, speed-up over the eager fp32 timed in its own group (the first group's
    when its group has none), expert share of floor, action error. Eager fp32 itself is reported once."""
    everything = [r for group in groups for r in group]
    first = next((r for r in everything if is_baseline(r)), None)
    records = []
    for group in groups:
        eager = next((r for r in group if is_baseline(r)), first)
        for r in group:
            if is_baseline(r) and records and r is not first:
                continue
            records.append(record(r, eager.timing.phases["e2e"].p50 if eager else None, measured))
    return records


def record(r: RunResult, base: float | None, measured: list[MeasuredCeiling]) -> dict:
    e2e = r.timing.phases["e2e"].p50
    return {
        "variant": variant_label(r.backend, r.precision, result_options(r)),
        "backend": r.backend,
        "precision": r.precision,
        "options": list(result_options(r)),
        "p50_ms": {phase: r.timing.phases[phase].p50 for phase in PHASES if phase in r.timing.phases},
        "speedup_vs_torch_fp32": base / e2e if base else None,
        "expert_share_of_floor": expert_share(r, measured),
        "relative_action_error": r.correctness.relative_error if r.correctness else 0.0,
        "valid": r.valid,
        "compile_s": r.backend_details.get("compile_total_s"),
        "run_id": r.run_id,
        "baseline_e2e_ms": base,
    }


def show(records: list[dict]) -> None:
    table = Table(title="per-phase p50 (ms); speed-up over torch eager fp32, end to end")
    for column in ("variant", *PHASES, "× eager fp32", "expert % of floor", "action error", "gate", "compile s"):
        table.add_column(column, justify="left" if column in ("variant", "gate") else "right")
    for rec in sorted(records, key=lambda r: r["p50_ms"]["e2e"]):
        phases = [f"{rec['p50_ms'][p]:.1f}" if p in rec["p50_ms"] else "—" for p in PHASES]
        speedup = f"{rec['speedup_vs_torch_fp32']:.2f}×" if rec["speedup_vs_torch_fp32"] else "—"
        share = f"{rec['expert_share_of_floor']:.0%}" if rec["expert_share_of_floor"] is not None else "—"
        share += " (!)" if beats_its_floor(rec["expert_share_of_floor"]) else ""
        error = "reference" if rec["variant"] == "torch fp32" else f"{rec['relative_action_error']:.2e}"
        compile_s = f"{rec['compile_s']:.0f}" if rec["compile_s"] else ""
        gate = "pass" if rec["valid"] else "FAIL"
        table.add_row(rec["variant"], *phases, speedup, share, error, gate, compile_s)
    console.print(table)
    beaten = [rec["variant"] for rec in records if beats_its_floor(rec["expert_share_of_floor"])]
    if beaten:
        console.print(
            f"(!) {', '.join(beaten)}: faster than the roofline floor, which no run can be; a ceiling of this run "
            "was read low at that precision, so the share overstates and counts toward no target"
        )


def verdict(records: list[dict], kind: str) -> dict:
    """The issue's targets for this CPU class against the best valid variant."""
    valid = [r for r in records if r["valid"] and r["speedup_vs_torch_fp32"]]
    if not valid or kind not in TARGETS:
        return {"cpu_class": kind, "checked": False, "why": "no target for this CPU class or no valid variant"}
    best = max(valid, key=lambda r: r["speedup_vs_torch_fp32"])
    speedup_target, share_target = TARGETS[kind]
    outcome = {
        "cpu_class": kind,
        "checked": True,
        "best_variant": best["variant"],
        "best_speedup": best["speedup_vs_torch_fp32"],
        "speedup_target": speedup_target,
        "speedup_met": best["speedup_vs_torch_fp32"] >= speedup_target,
        "expert_share_of_floor": best["expert_share_of_floor"],
    }
    if share_target is not None:
        share = best["expert_share_of_floor"]
        met = share is not None and share >= share_target and not beats_its_floor(share)
        outcome.update(
            expert_share_target=share_target, expert_share_met=met, expert_share_beats_floor=beats_its_floor(share)
        )
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smolvla")
    parser.add_argument("--cameras", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--variants",
        nargs="+",
        type=variant_name,
        default=None,
        help="backend:precision pairs, each with optional +option suffixes (default: all pairs, no options)",
    )
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--min-iterations", type=int, default=5)
    parser.add_argument("--min-duration", type=float, default=20.0)
    parser.add_argument("--no-ceilings", action="store_true", help="skip measuring GEMM peak and bandwidth")
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks"))
    parser.add_argument("--json-out", type=Path, default=None, help="write the comparison as a JSON artifact")
    parser.add_argument(
        "--max-cpu-isa",
        choices=tuple(CAPS),
        default=None,
        help="emulate a lesser CPU class on this one: vlabench and every runtime capped to it (ONNX Runtime, which "
        "has no cap, is left out); the artifact says so",
    )
    args = parser.parse_args()
    run_capped(args.max_cpu_isa)
    flags = read_cpu_flags()
    kind = cpu_class(flags)
    console.print(f"CPU: {read_cpu_model()} ({kind}); flags: {' '.join(f for f in FLAGS_SHOWN if f in flags)}")
    if active_cap():
        caps = ", ".join(f"{name}={value}" for name, value in recorded_caps().items())
        console.print(f"[yellow]emulated:[/] {CAPS[active_cap()].stands_for}, on this CPU ({caps})")
    console.print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    chosen, skipped = variants(args.variants)
    base = RunConfig(
        model=args.model,
        cameras=args.cameras,
        steps=args.steps,
        threads=args.threads,
        warmup=args.warmup,
        min_iterations=args.min_iterations,
        min_duration_s=args.min_duration,
        energy_meter="none",
        measure_ceilings=False,  # measured once, below, for every variant
        preprocess=False,  # the model alone: the input pipeline is the same for every variant
        out=args.out,
    )
    check_paths(base)
    pairs = [(*BASELINE, ()), *(v for v in chosen if v != (*BASELINE, ()))]  # the baseline first: it leads each group
    torch.set_num_threads(args.threads)
    measured = [] if args.no_ceilings else measure_ceilings(CPU, tuple(dict.fromkeys(p for _, p, _ in pairs)))
    bandwidth = next((c for c in measured if c.quantity == "memory_bandwidth"), None)
    if bandwidth:
        console.print(f"memory bandwidth (every variant's floor): {bandwidth.value:.1f} GB/s ({bandwidth.detail})")
    configs = [
        base.model_copy(update={"backend": name, "precision": precision, **option_settings(options)})
        for name, precision, options in pairs
    ]
    groups, refused, crashed = run_variants(configs)
    skipped += refused
    results = [result for group in groups for result in group]
    for result in results:
        write_result(result, args.out)
    records = rows(groups, measured)
    if records:
        show(records)
    for reason in skipped:
        console.print(f"  skipped {reason}")
    for message in crashed:
        console.print(f"  [red]crashed[/] {message}")
    checked = verdict(records, kind)
    if checked["checked"]:
        met = "meets" if checked["speedup_met"] else "misses"
        console.print(
            f"best valid variant: {checked['best_variant']} at {checked['best_speedup']:.2f}× eager fp32 ({met} the "
            f"{checked['speedup_target']}× target for a {kind} CPU{', emulated' if active_cap() else ''})"
        )
    console.print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json_out:
        artifact = {
            "kind": "backends-benchmark",
            "model": args.model,
            "workload": results[0].workload.model_dump(mode="json") if results else None,
            "threads": args.threads,
            "cpu": {
                "model": read_cpu_model(),
                "class": kind,
                "flags": [f for f in FLAGS_SHOWN if f in flags],
                **emulation_entry(),
            },
            "variants": records,
            "skipped": skipped,
            "crashed": crashed,
            "groups": [[variant_label(r.backend, r.precision, result_options(r)) for r in group] for group in groups],
            "targets": checked,
            "ceilings": [c.model_dump() for c in measured],
            "memory_bandwidth_gbs": bandwidth.value if bandwidth else None,
        }
        atomic_write_json(args.json_out, artifact)


if __name__ == "__main__":
    main()
