"""What ``vlabench sweep`` shows: the expanded runs, a progress bar with ETA, the summary table."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from vlabench.cli.views.console import safe
from vlabench.cli.views.tables import PlainTable
from vlabench.fleet.sweep_file import SweepRun, show_value
from vlabench.results.sweep_record import RunRecord

STATUS_STYLE = {"ok": "green", "invalid": "red", "failed": "bold red", "skipped": "dim"}


def runs_table(runs: list[SweepRun], done: set[str], ray: bool = False) -> Table:
    """The expanded matrix in execution order; ``done`` marks runs a resume would skip."""
    axes = list(dict.fromkeys(name for run in runs for name in run.axes))
    already = len(done & {r.key for r in runs})
    table = PlainTable(title=f"{len(runs)} runs ({already} already done)", title_justify="left")
    table.add_column("#", justify="right")
    for name in axes:
        table.add_column(name)
    if ray:
        table.add_column("Ray resource")
    table.add_column("id")
    table.add_column("state")
    for index, run in enumerate(runs, 1):
        cells = [show_value(run.axes.get(name)) for name in axes]
        state = Text("done, skipped", style="dim") if run.key in done else "to run"
        table.add_row(str(index), *cells, *([run.resource] if ray else []), run.key, state)
    return table


def summary_table(records: list[RunRecord], wall_s: float) -> Table:
    counts = Counter(record.status for record in records)
    totals = ", ".join(f"{counts[s]} {s}" for s in ("ok", "invalid", "failed", "skipped"))
    table = PlainTable(title=f"sweep: {totals} in {wall_s:.1f} s", title_justify="left")
    for column, justify in (("run", "left"), ("status", "left"), ("e2e p50 ms", "right"), ("wall s", "right")):
        table.add_column(column, justify=justify)
    table.add_column("where / result / reason", overflow="fold")
    for record in records:
        where = f"{record.hostname}: " if record.node_id else ""
        detail = record.reason if record.status == "failed" else record.result
        table.add_row(
            record.label,
            Text(record.status, style=STATUS_STYLE[record.status]),
            f"{record.e2e_p50_ms:.1f}" if record.e2e_p50_ms is not None else "—",
            f"{record.wall_s:.1f}" if record.wall_s is not None and record.status != "skipped" else "—",
            where + (detail or ""),
        )
    return table


class SweepProgress:
    """A rich progress bar over the pending runs; the ETA comes from the runs finished so far."""

    def __init__(self, console: Console, total: int) -> None:
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
        )
        self.task = self.bar.add_task("sweep", total=total)
        self.console = console

    def __enter__(self) -> SweepProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def started(self, run: SweepRun) -> None:
        self.bar.update(self.task, description=run.label)

    def finished(self, record: RunRecord) -> None:
        style = STATUS_STYLE[record.status]
        detail = f": {record.reason}" if record.reason else ""
        self.bar.console.print(Text.assemble((record.status, style), " ", safe(record.label + detail)), highlight=False)
        self.bar.advance(self.task)
