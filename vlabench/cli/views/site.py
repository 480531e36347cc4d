"""The progress of ``vlabench site build``: a bar per stage on a terminal, a line per stage otherwise."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


class BuildProgress:
    """Called as ``progress(stage, done, total)`` by the site builder; a context manager around the build."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> BuildProgress:
        if self.console.is_terminal:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(stage, total=total)
            if not self.console.is_terminal:
                self.console.print(f"site build: {stage} …", highlight=False)
        self.bar.update(self.tasks[stage], completed=done, total=total)
