"""The roofline chart: an interactive, self-contained HTML page (plotly, its JS inlined; no CDN)."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from vlabench.analysis.roofline import RooflineReport
from vlabench.atomic import atomic_write_text

CEILING_STYLE = {"datasheet": "dash", "measured": "solid"}
PHASE_COLORS = {"vision": "#1f77b4", "prefill": "#ff7f0e", "denoise_step": "#2ca02c", "action": "#d62728"}


def roofline_figure(report: RooflineReport) -> go.Figure:
    """Both ceilings as roofs; each phase at its achieved rate (filled) or its attainable one (open); the heaviest
    operator kinds at their attainable rate."""
    intensities = [p.intensity for p in report.phases] + [o.intensity for o in report.operators if o.intensity > 0]
    ridges = [c.ridge for c in report.ceilings]
    low = min(intensities + ridges) / 4
    high = max(intensities + ridges) * 4
    figure = go.Figure()
    for ceiling in report.ceilings:
        xs = [low, ceiling.ridge, high]
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=[ceiling.attainable_tflops(x) for x in xs],
                mode="lines",
                name=f"{ceiling.source} roof: {ceiling.peak_tflops:.3g} TFLOP/s, {ceiling.bandwidth_gbs:.3g} GB/s "
                f"(ridge {ceiling.ridge:.0f} FLOP/B)",
                line={"dash": CEILING_STYLE[ceiling.source], "color": "#444"},
                hovertext=ceiling.detail,
            )
        )
    primary = report.ceiling(report.primary) if report.primary else None
    for phase in report.phases:
        if phase.phase not in PHASE_COLORS:
            continue
        measured = phase.achieved_tflops is not None
        rate = phase.achieved_tflops if measured else phase.bounds[report.primary].attainable_tflops  # type: ignore[index]
        figure.add_trace(
            go.Scatter(
                x=[phase.intensity],
                y=[rate],
                mode="markers+text",
                text=[phase.phase],
                textposition="top center",
                name=f"{phase.phase} ({'achieved' if measured else 'attainable'})",
                marker={
                    "size": 14,
                    "color": PHASE_COLORS[phase.phase],
                    "symbol": "circle" if measured else "circle-open",
                },
            )
        )
    if primary is not None:
        operators = [o for o in report.operators if o.intensity > 0]
        figure.add_trace(
            go.Scatter(
                x=[o.intensity for o in operators],
                y=[primary.attainable_tflops(o.intensity) for o in operators],
                mode="markers",
                name="heaviest operators (attainable)",
                text=[f"{o.phase} {o.block}.{o.name} ×{o.count}: {o.flops / 1e9:.3g} GFLOP" for o in operators],
                marker={"size": 8, "symbol": "diamond-open", "color": "#9467bd"},
            )
        )
    figure.update_layout(
        title=f"Roofline: {report.model} on {report.device}, {report.precision}, {report.cameras} camera(s), "
        f"{report.steps} steps",
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "TFLOP/s"},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.2},
    )
    return figure


def write_roofline_html(report: RooflineReport, path: Path) -> Path:
    html = roofline_figure(report).to_html(include_plotlyjs=True, full_html=True)
    return atomic_write_text(path, html)
