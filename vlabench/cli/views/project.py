"""Rich rendering of ``vlabench project``: projected rows (never ranked with measured ones) and their parameters."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from vlabench.cli.views.tables import titled_table
from vlabench.commands.project import ProjectOutcome


def _num(value: float | None, digits: str = ",.1f") -> str:
    return "—" if value is None else format(value, digits)


def _band(value: float | None, uncalibrated: bool = False) -> str:
    text = "none (no entry to score)" if value is None else f"±{value:.0%}"
    return f"{text} uncalibrated" if uncalibrated else text


def project_renderables(outcome: ProjectOutcome) -> list[Any]:
    """The projected rows table, the fitted parameters and the method."""
    columns = [
        "model",
        "device",
        "stack",
        "precision",
        "vision ms",
        "prefill ms",
        "action ms",
        "e2e ms",
        "error band",
        "inferences/s",
        "J/inference (est.)",
        "$/M actions",
        "GB needed / on device",
        "fits",
    ]
    numeric = {c for c in columns if c.endswith(("ms", "/s", "(est.)", "actions", "device"))}
    rows = titled_table("projected (not measured; unranked)", columns, numeric)
    for r in outcome.rows:
        fits = "—" if r.fits is None else ("yes" if r.fits else "does NOT fit")
        rows.add_row(
            r.model,
            r.device,
            r.stack,
            r.precision,
            *(_num(r.phases_ms[p]) for p in ("vision", "prefill", "action", "e2e")),
            _band(r.error_band, r.uncalibrated),
            _num(r.inference_hz, ".2f"),
            _num(r.joules_per_inference),
            _num(r.usd_per_million_actions, ",.2f"),
            f"{r.memory_needed_gb:.1f} / {_num(r.usable_memory_gb, 'g')}",
            Text(fits, style="bold red") if r.fits is False else fits,
        )
    params = titled_table(
        "fitted stack parameters",
        [
            "stack",
            "share of peak",
            "share of bandwidth",
            "µs per kernel",
            "fitted on",
            "published latencies",
            "band",
            "coverage",
        ],
    )
    for name, value in outcome.parameters.stacks.items():
        params.add_row(
            name,
            f"{value.share_of_peak:.1%}",
            f"{value.share_of_bandwidth:.1%}",
            f"{value.dispatch_us:.2f}",
            value.fitted_on,
            str(value.observations),
            _band(outcome.error_bands[name].value, outcome.error_bands[name].uncalibrated),
            _num(outcome.error_bands[name].coverage, ".0%"),
        )
    hosts = ", ".join(f"{d} ×{v:.3g}" for d, v in sorted(outcome.parameters.host_factor.items()))
    table = outcome.bands
    coverage = "—" if table.overall_coverage is None else f"{table.overall_coverage:.0%}"
    return [
        rows,
        params,
        Text(
            f"bands: split-conformal {table.quantile:.0%} quantile of leave-one-source-out errors of the row's stack "
            f"on its device class; {coverage} of held-out entries fell inside their band. Uncalibrated (fewer than "
            f"3 published entries, the band of every entry): {', '.join(outcome.uncalibrated) or 'none'}"
        ),
        Text(f"host factors (per-kernel cost relative to the reference host): {hosts}"),
        Text(f"method: {outcome.method}", style="dim"),
    ]
