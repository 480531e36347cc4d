"""The site's plotly charts: each figure is written once, as ``charts/NAME.js`` (its JSON, no template), and drawn by
``assets/charts.js`` with the shared plotly.js asset (no CDN) and the one plotly_white template
(``assets/plot-template.js``) into every page that shows it: a run's roofline on its run page and its device page."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.utils import PlotlyJSONEncoder

from vlabench.analysis.roofline import RooflineReport
from vlabench.analysis.roofline_chart import roofline_figure
from vlabench.vocab import Phase

from .rows import Run, optimizations

PHASE_COLORS = {"vision": "#1f77b4", "prefill": "#ff7f0e", "action": "#d62728"}


def label(text: str) -> str:
    """Plotly renders a subset of HTML in labels: names from result files are shown as text."""
    return html.escape(text, quote=False)


TEMPLATE = "plotly_white"


@contextmanager
def bare_figures() -> Iterator[str]:
    """Figures built without plotly's Python-side templates: validating one costs ~0.1 s a figure (the default
    template, and the plotly_white that ``roofline_figure`` asks for) and would copy its 7 kB into every chart. Yields
    the plotly_white template's JSON, which the pages apply once (``assets/plot-template.js``)."""
    default, white = pio.templates.default, pio.templates[TEMPLATE]
    pio.templates.default = None
    pio.templates[TEMPLATE] = go.layout.Template()
    try:
        yield json.dumps(white.to_plotly_json(), cls=PlotlyJSONEncoder)
    finally:
        pio.templates[TEMPLATE] = white
        pio.templates.default = default


def script_safe(text: str) -> str:
    """JSON that stays inert in HTML and scripts: no ``<``, ``>`` or ``&`` survives (``</script>`` cannot)."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class Charts:
    """The ``charts/`` folder of a site: ``add`` writes a figure once, ``html`` is what a page places to draw it."""

    def __init__(self, site: Path) -> None:
        self.folder = site / "charts"
        self.names: set[str] = set()

    def add(self, name: str, figure: go.Figure) -> str:
        """Write ``figure`` as ``charts/NAME.js`` (``name``: a slug, see ``rows.slug``); returns the name."""
        figure.update_layout(margin={"t": 60, "b": 40})
        document = figure.to_plotly_json()
        document["layout"].pop("template", None)
        self.folder.mkdir(exist_ok=True)
        data = script_safe(json.dumps(document, cls=PlotlyJSONEncoder, separators=(",", ":")))
        (self.folder / f"{name}.js").write_text(f"vlabenchChart({json.dumps(name)}, {data});\n", encoding="utf-8")
        self.names.add(name)
        return name

    @staticmethod
    def html(name: str, root: str) -> str:
        """The ``<div>`` a chart is drawn into and the script of its figure (relative to a page ``root``)."""
        return f'<div class="plot" data-chart="{name}"></div><script src="{root}charts/{name}.js"></script>'


def run_phase_figure(run: Run, title: str) -> go.Figure:
    """One run's vision, prefill and action latency, stacked, at p50 and at p99 (each phase's own percentile)."""
    phases = run.result.timing.phases
    figure = go.Figure()
    for phase in Phase.END_TO_END_PARTS:
        if phase in phases:
            values = [phases[phase].p50, phases[phase].p99]
            figure.add_trace(
                go.Bar(
                    x=["p50", "p99"],
                    y=values,
                    name=phase,
                    marker={"color": PHASE_COLORS[phase]},
                    hovertemplate=f"{phase} %{{y:.4g}} ms<extra></extra>",
                )
            )
    figure.update_layout(barmode="stack", title=title, yaxis={"title": "latency (ms)"})
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


def escaped(value: Any) -> Any:
    """Every string in a JSON-like value (dictionary keys included) through ``label``."""
    if isinstance(value, str):
        return label(value)
    if isinstance(value, dict):
        return {label(key) if isinstance(key, str) else key: escaped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [escaped(item) for item in value]
    return value


def roofline_chart(report: RooflineReport) -> go.Figure | None:
    """``roofline_chart.roofline_figure`` for a result's roofline block; None when it cannot be drawn. Every text of
    the block (model, device, precision, ceiling details, operator names) reaches plotly escaped."""
    if not report.phases or (report.primary is None and any(p.achieved_tflops is None for p in report.phases)):
        return None
    return roofline_figure(RooflineReport.model_validate(escaped(report.model_dump())))
