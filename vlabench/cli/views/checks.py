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
            f"{len(report.matches)} matched configurations, {len(report.regressions)} regressed ({settings.phase} "
            f"latency: the typical runs' median and the least disturbed runs' must both move beyond "
            f"{settings.threshold:.0%}, the latter's {settings.confidence:.0%} bootstrap interval widened by their "
            f"drift clear of zero; energy threshold {settings.energy_threshold:.0%})"
        ),
        title_justify="left",
    )
    columns = ("run", "runs", "base p50 ms", "cand p50 ms", "Δ typical", "Δ least disturbed (CI)", "detects ≥")
    for column in (*columns, "latency", "J/action Δ", "energy"):
        table.add_column(column, justify="left" if column in ("run", "latency", "energy") else "right")
    for match in report.matches:
        latency, energy = match.latency, match.energy
        energy_cell = Text.assemble(_styled(energy.verdict), safe(f" ({energy.note})" if energy.note else ""))
        invalid = safe(f" INVALID ({match.candidate_invalid_reason or 'correctness gate'})", style="bold red")
        label = Text.assemble(safe(match.label), invalid if match.correctness_regressed else "")
        if latency is None:
            cells = ["—"] * 6 + [_styled("no data")]
        else:
            runs = (
                f"{latency.baseline.runs}/{latency.candidate.runs}" if latency.baseline and latency.candidate else "—"
            )
            least = _percent(latency.least_disturbed_change)
            if latency.ci_low is not None:
                least += f" [{_percent(latency.ci_low)}, {_percent(latency.ci_high)}]"
            verdict = Text.assemble(_styled(latency.verdict), "*" if latency.caveats else "")
            cells = [
                runs,
                f"{latency.baseline_p50_ms:.2f}",
                f"{latency.candidate_p50_ms:.2f}",
                _percent(latency.relative_change),
                least,
                "—" if latency.minimum_detectable is None else f"{latency.minimum_detectable:.1%}",
                verdict,
            ]
        table.add_row(label, *cells, _percent(energy.relative_change), energy_cell)
    return table


def compare_caveats(report: Report) -> list[str]:
    """Each match's caveats, under the table (``*`` marks the verdicts they qualify)."""
    return [
        f"* {match.label}: {caveat}"
        for match in report.matches
        if match.latency is not None
        for caveat in match.latency.caveats
    ]


def problems_table(problems: list[Problem]) -> Table:
    table = PlainTable(title=f"{len(problems)} problems", title_justify="left")
    for column in ("file", "field", "problem"):
        table.add_column(column, overflow="fold")
    for problem in problems:
        table.add_row(problem.file, problem.field, problem.message)
    return table
