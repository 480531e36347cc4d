"""The site's plotly charts, rendered as ``<div>``s that use the one shared plotly.js asset (no CDN)."""

from __future__ import annotations

import html
import math
from typing import Any

import plotly.graph_objects as go

from vlabench.analysis.roofline import RooflineReport
from vlabench.analysis.roofline_chart import roofline_figure
from vlabench.vocab import Phase

from .rows import Run, optimizations

PHASE_COLORS = {"vision": "#1f77b4", "prefill": "#ff7f0e", "action": "#d62728"}


def label(text: str) -> str:
    """Plotly renders a subset of HTML in labels: names from result files are shown as text."""
    return html.escape(text, quote=False)


def div(figure: go.Figure, div_id: str) -> str:
    """The chart's ``<div>`` and its plotly call; plotly escapes ``<`` in the JSON it embeds."""
    figure.update_layout(template="plotly_white", margin={"t": 60, "b": 40})
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, default_height="460px")


def row_label(row: dict[str, Any]) -> str:
    return label(f"{row['model']} · {row['device']} · {row['backend']} {row['precision']} · {row['optimizations']}")


def pareto_figure(rows: list[dict[str, Any]], column: str, title: str, axis: str, control_hz: float) -> go.Figure:
    """Feasible measured rows: latency against ``column``; the Pareto-optimal ones (``cet.rank``) highlighted."""
    points = [r for r in rows if r["kind"] == "run" and r["feasible"] and r[column] is not None]
    figure = go.Figure()
    for on_front, name, style in (
        (False, "feasible", {"size": 9, "color": "#9aa5b1"}),
        (True, "Pareto-optimal (time, energy, cost)", {"size": 13, "color": "#d62728", "symbol": "diamond"}),
    ):
        chosen = sorted((r for r in points if bool(r["pareto"]) == on_front), key=lambda r: r["latency_p50_ms"])
        figure.add_trace(
            go.Scatter(
                x=[r["latency_p50_ms"] for r in chosen],
                y=[r[column] for r in chosen],
                mode="markers+lines" if on_front else "markers",
                name=name,
                text=[row_label(r) for r in chosen],
                hovertemplate="%{text}<br>p50 %{x:.3g} ms<br>%{y:.3g}<extra></extra>",
                marker=style,
                line={"dash": "dot", "color": "#d62728"},
            )
        )
    figure.update_layout(
        title=f"{title} (feasible at {control_hz:g} Hz)",
        xaxis={"title": "end-to-end p50 latency (ms)", "type": "log"},
        yaxis={"title": axis, "type": "log"},
    )
    return figure


def phase_figure(runs: list[Run], title: str) -> go.Figure:
    """Stacked p50 of vision, prefill and action per run (one bar per device / backend / precision / optimization)."""
    names = [
        label(f"{r.result.device.profile} {r.result.backend} {r.result.precision} {optimizations(r.result)}")
        for r in runs
    ]
    figure = go.Figure()
    for phase in Phase.END_TO_END_PARTS:
        values = [r.result.timing.phases[phase].p50 if phase in r.result.timing.phases else None for r in runs]
        figure.add_trace(go.Bar(x=names, y=values, name=phase, marker={"color": PHASE_COLORS[phase]}))
    figure.update_layout(barmode="stack", title=title, yaxis={"title": "p50 latency (ms)"})
    return figure


def roofline_div(report: RooflineReport, div_id: str) -> str | None:
    """``roofline_chart.roofline_figure`` for a result's roofline block; None when it cannot be drawn."""
    if not report.phases or (report.primary is None and any(p.achieved_tflops is None for p in report.phases)):
        return None
    escaped = report.model_copy(update={"model": label(report.model), "device": label(report.device)})
    return div(roofline_figure(escaped), div_id)


def exact_counterpart(run: Run, runs: list[Run]) -> Run | None:
    """The latest run of the same configuration without any optimization (the speed-up's baseline)."""
    r = run.result
    same = [
        o
        for o in runs
        if optimizations(o.result) == "none"
        and (o.result.model.name, o.result.device.profile, o.result.backend, o.result.precision)
        == (r.model.name, r.device.profile, r.backend, r.precision)
        and (o.result.workload.cameras, o.result.workload.steps) == (r.workload.cameras, r.workload.steps)
    ]
    return max(same, key=lambda o: o.result.started_utc) if same else None


def fidelity_error(run: Run) -> float | None:
    """DP-Cache's open-loop error against the exact path, else the correctness gate's error against the reference."""
    opt, correctness = run.result.optimization, run.result.correctness
    if opt is not None and opt.dp_cache_error is not None:
        return opt.dp_cache_error.relative
    return correctness.relative_error if correctness is not None else None


def speedup_points(runs: list[Run]) -> list[dict[str, Any]]:
    """Optimized runs with an exact counterpart: e2e p50 speed-up and action error."""
    points = []
    for run in runs:
        if optimizations(run.result) == "none":
            continue
        exact, error = exact_counterpart(run, runs), fidelity_error(run)
        if exact is None or error is None or not math.isfinite(error):
            continue  # no baseline, or no error to plot (NaN actions: the run is flagged invalid elsewhere)
        speedup = exact.result.timing.phases["e2e"].p50 / run.result.timing.phases["e2e"].p50
        points.append({"run": run, "exact": exact, "speedup": speedup, "error": error})
    return points


def speedup_figure(points: list[dict[str, Any]]) -> go.Figure:
    figure = go.Figure(
        go.Scatter(
            x=[p["error"] for p in points],
            y=[p["speedup"] for p in points],
            mode="markers",
            text=[
                label(
                    f"{p['run'].result.model.name} · {p['run'].result.device.profile} · {p['run'].result.backend} "
                    f"{p['run'].result.precision} · {optimizations(p['run'].result)}"
                )
                for p in points
            ],
            hovertemplate="%{text}<br>speed-up %{y:.3g}×<br>relative error %{x:.3g}<extra></extra>",
            marker={"size": 12, "color": "#2ca02c"},
            name="optimized run",
        )
    )
    figure.add_hline(y=1.0, line_dash="dash", line_color="#888")
    figure.update_layout(
        title="Optimization speed-up vs fidelity (e2e p50 of the matching exact run ÷ optimized)",
        xaxis={"title": "relative action error (DP-Cache open loop, else the correctness gate)"},
        yaxis={"title": "speed-up ×"},
        showlegend=False,
    )
    return figure
