"""What ``vlabench compare`` and ``vlabench validate`` show: the matched runs with their verdicts, the problems."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from vlabench.cli.views.console import safe
from vlabench.cli.views.tables import PlainTable
from vlabench.results.compare import Report
from vlabench.results.validate import Problem

STYLES = {"regression": "bold red", "improvement": "green"}


def _styled(verdict: str) -> Text:
    return Text(verdict, style=STYLES.get(verdict, ""))


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def compare_table(report: Report) -> Table:
    settings = report.settings
    table = PlainTable(
        title=(
            f"{len(report.matches)} matched runs, {len(report.regressions)} regressed ({settings.phase} latency: "
            f"{settings.confidence:.0%} bootstrap CI of the median change widened by the runs' own drift, threshold "
            f"{settings.threshold:.0%}; energy "
            f"threshold {settings.energy_threshold:.0%})"
        ),
        title_justify="left",
    )
    for column in ("run", "base p50 ms", "cand p50 ms", "Δ median", "CI", "drift", "latency", "J/action Δ", "energy"):
        table.add_column(column, justify="left" if column in ("run", "latency", "energy") else "right")
    for match in report.matches:
        latency, energy = match.latency, match.energy
        verdict = latency.verdict if latency else "no data"
        ci = (
            f"[{_percent(latency.ci_low)}, {_percent(latency.ci_high)}]"
            if latency and latency.ci_low is not None
            else "—"
        )
        energy_cell = Text.assemble(_styled(energy.verdict), safe(f" ({energy.note})" if energy.note else ""))
        invalid = safe(f" INVALID ({match.candidate_invalid_reason or 'correctness gate'})", style="bold red")
        label = Text.assemble(safe(match.label), invalid if match.correctness_regressed else "")
        table.add_row(
            label,
            f"{latency.baseline_p50_ms:.2f}" if latency else "—",
            f"{latency.candidate_p50_ms:.2f}" if latency else "—",
            _percent(latency.relative_change if latency else None),
            ci,
            f"±{latency.noise:.1%}" if latency else "—",
            _styled(verdict),
            _percent(energy.relative_change),
            energy_cell,
        )
    return table


def problems_table(problems: list[Problem]) -> Table:
    table = PlainTable(title=f"{len(problems)} problems", title_justify="left")
    for column in ("file", "field", "problem"):
        table.add_column(column, overflow="fold")
    for problem in problems:
        table.add_row(problem.file, problem.field, problem.message)
    return table
