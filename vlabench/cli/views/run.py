"""What ``vlabench run`` shows: the plan, a progress bar for long runs, one result's tables, backends compared."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.text import Text

from vlabench.cli.views.serving import serving_lines
from vlabench.cli.views.tables import FittedTable
from vlabench.cli.views.verdicts import control_line, feasibility_line
from vlabench.commands.run import RunPlan
from vlabench.config import RunConfig
from vlabench.measure.run_settings import runner_settings
from vlabench.measure.stats import P99_BOUND_SAMPLES
from vlabench.results.assemble import execution_model
from vlabench.results.schema import RunResult
from vlabench.results.sustained import full_windows
from vlabench.vocab import Phase

GIB = 1024**3
PROGRESS_AFTER_S = 3.0


def timing_plan(c: RunConfig) -> str:
    """When the timed pass stops, as the run will apply it."""
    if c.duration_s is not None:
        return f"sustained for {c.duration_s:g} s (percentiles per {c.window_s:g} s window)"
    settings = runner_settings(c)
    wanted = settings.min_iterations
    bound = "enough to bound p99" if wanted == P99_BOUND_SAMPLES else f"p99 needs {P99_BOUND_SAMPLES}: capped"
    count = c.min_iterations or f"{wanted} ({bound})"
    return (
        f"≥ {count} inferences and ≥ {c.min_duration_s:g} s (caps: {settings.max_iterations} inferences, "
        f"{settings.max_duration_s:g} s)"
    )


def plan_summary(plans: list[RunPlan]) -> Text:
    plan = plans[0]
    c, w = plan.config, plan.workload
    backends = ", ".join(f"{p.backend.name} ({p.config.precision or p.precision})" for p in plans)
    lines = [
        f"model      {plan.spec.name}: {plan.footprint.params / 1e6:,.1f}M parameters, spec {plan.spec.spec_hash}",
        f"device     {plan.device.profile.name} ({plan.device.profile.display_name}) on {plan.device.torch_device}"
        f" — {plan.device.note}",
        f"backend    {backends}" + (", interleaved in one process" if len(plans) > 1 else ""),
        f"workload   {w.cameras} camera(s) × {plan.spec.tokens_per_camera} tokens, {w.prefix_tokens} prefix "
        f"tokens, {w.steps} denoising steps, chunk {w.chunk}",
        f"timing     {c.warmup} warm-up, then {timing_plan(c)}; control target {c.control_hz:g} Hz judged on p99, "
        f"execution {execution_model(c, w).label()}",
        f"memory     ≈ {plan.footprint.total_bytes / GIB:.2f} GiB estimated",
        *reference_plan(plans),
        f"energy     {energy_plan(plan)}",
        *(f"warning    {caveat}" for p in plans for caveat in p.caveats),
    ]
    return Text("\n".join(lines))


def reference_plan(plans: list[RunPlan]) -> list[str]:
    """The correctness gate's reference, and why it is not fp32 when it is not."""
    choice = next((p.reference for p in plans if p.reference), None)
    if choice is None:
        return []
    if not choice.reason:
        return ["reference  torch eager fp32 (the correctness gate's reference)"]
    return [
        f"reference  torch eager {choice.precision}, not fp32: {choice.reason}; errors are judged against this "
        f"{choice.precision} reference"
    ]


def energy_plan(plan: RunPlan) -> str:
    meter = plan.meter.meter
    if meter is None:
        return "not measured (--energy-meter none)"
    c = plan.config
    return (
        f"{meter.method} ({meter.label}, scope {meter.scope}): {c.idle_window_s:g} s idle, then whole inferences "
        f"for ≥ {c.energy_window_s:g} s in a pass of their own"
    )


def result_tables(result: RunResult) -> list[Any]:
    timing = result.timing
    e2e = timing.phases["e2e"].p50
    table = FittedTable(
        f"{result.model.name} on {result.device.profile} · {result.backend} {result.precision} · "
        f"{timing.iterations} timed inferences",
        ["phase", "p50 ms", "p90 ms", "p99 ms", "mean ms", "stdev", "CoV", "share"],
        {"p50 ms", "p90 ms", "p99 ms", "mean ms", "stdev", "CoV", "share"},
        keys={"phase"},
        drop=["mean ms", "p90 ms", "stdev"],
    )
    for name, label in Phase.LABELS.items():
        if name not in timing.phases:
            continue
        stats = timing.phases[name]
        share = f"{stats.p50 / e2e:.0%}" if name in (*Phase.END_TO_END_PARTS, *Phase.PIPELINE) else ""
        cov = Text(f"{stats.cov:.1%}", style="yellow" if stats.cov > 0.05 else "")
        table.add_row(
            label,
            f"{stats.p50:.2f}",
            f"{stats.p90:.2f}",
            f"{stats.p99:.2f}",
            f"{stats.mean:.2f}",
            f"{stats.stdev:.2f}",
            cov,
            share,
        )
    memory = Text.assemble(
        f"memory     peak RSS {result.memory.peak_rss_bytes / GIB:.2f} GiB",
        f", CUDA max allocated {result.memory.cuda_max_allocated_bytes / GIB:.2f} GiB"
        if result.memory.cuda_max_allocated_bytes is not None
        else "",
    )
    return [
        table,
        Group(
            control_line(result),
            memory,
            cold_start_line(result),
            *sustained_lines(result),
            *serving_lines(result),
            correctness_line(result),
            *optimization_lines(result),
            *cet_lines(result),
            *warning_lines(result.warnings),
        ),
    ]


def cold_start_line(result: RunResult) -> Text:
    """Preparation stage by stage, the first inference, and the one after an idle period when probed."""
    first = f"first inference {result.timing.first_inference_ms:.1f} ms"
    cold = result.cold_start
    if cold is None:
        return Text(f"cold start {first}")
    stages = ", ".join(
        f"{name.replace('_', ' ')} {stage.seconds:.2f} s" + (" (cached)" if stage.cached else "")
        for name, stage in cold.stages.items()
    )
    idle = f"; after {cold.idle_s:g} s idle {cold.after_idle_ms:.1f} ms" if cold.after_idle_ms is not None else ""
    return Text(
        f"cold start first action after {cold.to_first_action_s:.2f} s: prepared in {cold.prepare_s:.2f} s"
        + (f" ({stages})" if stages else "")
        + f", {first}{idle}"
    )


def sustained_lines(result: RunResult) -> list[Text]:
    """Latency from the first window to the last, and what the sensors saw."""
    held = result.sustained
    if held is None or not held.windows:
        return []
    full = full_windows(held.windows) or held.windows
    first, last = full[0], full[-1]
    drift = f" ({held.p50_drift:+.1%})" if held.p50_drift is not None else ""
    lines = [
        Text(
            f"sustained  {len(held.windows)} window(s) of {held.window_s:g} s; full ones' p50 {first.p50:.2f} → "
            f"{last.p50:.2f} ms"
            f"{drift}, p99 {first.p99:.2f} → {last.p99:.2f} ms"
        )
    ]
    if held.sensors:
        end = held.sensors[-1].values
        shown = [f"{name} {value:.0f} MHz" for name, value in end.get("clock_mhz", {}).items()][:3]
        shown += [f"{name} {value:.0f} °C" for name, value in end.get("temperature_c", {}).items()][:3]
        seen = "; ".join(held.throttling) if held.throttling else "no throttling seen"
        lines.append(Text(f"sensors    {', '.join(shown) or 'none readable here'}; {seen}"))
    return lines


def optimization_lines(result: RunResult) -> list[Text]:
    info = result.optimization
    if info is None:
        return []
    parts = []
    if info.dp_cache is not None:
        parts.append(f"DP-Cache computes {info.dp_cache.label()} steps")
        if info.dp_cache_error is not None:
            error = info.dp_cache_error
            parts.append(
                f"open-loop error vs the exact path: max abs {error.max_abs:.3g}, RMSE {error.rmse:.3g}, "
                f"cosine {error.cosine:.5f}"
            )
    if info.fuse_expert_kv:
        parts.append("expert prefix K/V hoisted out of the loop (lossless)")
    return [Text("optimized  " + "; ".join(parts))]


def correctness_line(result: RunResult) -> Text:
    check = result.correctness
    if check is None:
        return Text("correct    reference run (torch eager fp32)")
    verdict = ("PASS", "bold green") if check.passed else ("INVALID", "bold red")
    tokens = ""
    if check.token_agreement is not None:
        tokens = f"; action tokens equal to the reference's {check.token_agreement:.1%} of {check.tokens_compared}"
    return Text.assemble(
        f"correct    vs torch {check.reference_precision}: actions max |error| {check.max_abs_error:.3g}, cosine "
        f"{check.cosine:.6f}; denoised displacement error {check.relative_error:.2e} (relative), cosine "
        f"{check.displacement_cosine:.6f}{tokens} → ",
        verdict,
        f" (tolerance {check.tolerance.max_relative_error:g} / {check.tolerance.min_cosine:g}"
        + ("" if check.reference_precision == "fp32" else f", relative to the {check.reference_precision} reference")
        + ")",
    )


def comparison(results: list[RunResult]) -> list[Any]:
    """Backends side by side, then each one's verdicts (control rate, correctness, energy, cost, feasibility) and
    warnings; the warnings every backend shares come once, last."""
    shared = [message for message in results[0].warnings if all(message in r.warnings for r in results)]
    verdicts = [
        Group(
            Text(f"\n{result.backend} {result.precision}", style="bold"),
            control_line(result),
            correctness_line(result),
            *cet_lines(result),
            *warning_lines(message for message in result.warnings if message not in shared),
        )
        for result in results
    ]
    return [comparison_table(results), *verdicts, *([Group(Text(""), *warning_lines(shared))] if shared else [])]


def warning_lines(messages: Iterable[str]) -> list[Text]:
    return [Text(f"warning: {message}", style="yellow") for message in messages]


def comparison_table(results: list[RunResult]) -> FittedTable:
    """Backends side by side; speed-up against eager torch at the same precision when it is in the set. A narrow
    terminal loses the phase columns first; the backend names, end-to-end latency and validity always stay."""
    eager = {r.precision: r.timing.phases["e2e"].p50 for r in results if r.backend == "torch"}
    table = FittedTable(
        f"{results[0].model.name} on {results[0].device.profile}: backends compared (interleaved), p50 in ms",
        [
            "backend",
            "prec",
            "vision",
            "prefill",
            "denoise step",
            "action",
            "e2e p50",
            "e2e p99",
            "speed-up",
            "error",
            "valid",
        ],
        {"vision", "prefill", "denoise step", "action", "e2e p50", "e2e p99", "speed-up", "error"},
        keys={"backend"},
        drop=["vision", "action", "prefill", "denoise step", "prec", "e2e p50", "speed-up"],
    )
    for result in results:
        phases = result.timing.phases
        baseline = eager.get(result.precision)
        check = result.correctness
        table.add_row(
            result.backend,
            result.precision,
            *(f"{phases[name].p50:.2f}" if name in phases else "fused" for name in Phase.SUMMARY),
            f"{phases['e2e'].p99:.2f}",
            f"{baseline / phases['e2e'].p50:.2f}×" if baseline else "—",
            f"{check.relative_error:.1e}" if check else "ref",
            Text("yes", style="green") if result.valid else Text("INVALID", style="bold red"),
        )
    return table


def cet_lines(result: RunResult) -> list[Text]:
    energy, cost = result.energy, result.cost
    if energy is None or cost is None:
        return [Text("energy     not measured")]
    style = "yellow" if energy.label == "estimated" else "green"
    lines = [
        Text.assemble(
            "energy     ",
            (energy.label.upper(), f"bold {style}"),
            f" ({energy.method}, scope {energy.scope}): idle {energy.idle_w:.1f} W, {energy.average_w:.1f} W over "
            f"{energy.window_s:.1f} s ({energy.window_inferences} inferences) → {energy.joules_per_inference:.2f} "
            + (
                f"J/inference, {energy.joules_per_action:.3f} J/action"
                if result.serving is None
                else f"J per inference of {result.workload.batch} row(s) in its own pass (per action: under serving)"
            ),
        )
    ]
    meter = energy.meter
    if energy.label == "estimated":
        lines.append(
            Text(
                f"           assumptions: TDP {meter['tdp_w']:.1f} W ({meter['tdp_source']}), idle "
                f"{meter['idle_w']:.1f} W ({meter['idle_source']}); {meter['model']}; "
                f"utilization = {meter['utilization']}",
                style="dim",
            )
        )
    lines += [Text(f"           {note}", style="dim") for note in energy.notes]
    basis = "" if cost.basis == "hardware+electricity" else " (electricity only: no purchase price; pass --price-usd)"
    if cost.robots_per_device != 1:
        basis += f"; the device's hour shared by {cost.robots_per_device:g} robots"
    price = f"${cost.price_usd:,.0f}{' (estimate)' if cost.price_estimate else ''}" if cost.price_usd else "none"
    lines.append(
        Text(
            f"cost       ${cost.usd_per_million_actions:.4g} per 1M actions, ${cost.usd_per_robot_hour:.4g} per "
            f"robot-hour at {cost.actions_per_robot_hour / 3600:.3g} actions/s "
            f"({cost.execution.label() if cost.execution else 'chunked, before schema 1.2'}){basis}; price {price}, "
            f"{cost.assumptions.lifetime_years:g} y × {cost.assumptions.duty_cycle:.0%} duty, "
            f"${cost.assumptions.electricity_usd_per_kwh:g}/kWh"
        )
    )
    lines.append(feasibility_line(result))
    return lines


class RunProgress:
    """A progress bar that appears only once a run is expected to take more than a few seconds."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar:
            self.bar.stop()

    def update(self, done: int, expected: int) -> None:
        elapsed = time.monotonic() - self.started
        if self.bar is None:
            if elapsed / done * (expected - done) < PROGRESS_AFTER_S or not self.console.is_terminal:
                return
            self.bar = Progress(
                TextColumn("timing"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("timing", total=expected)
        self.bar.update(self.task, completed=done, total=expected)
