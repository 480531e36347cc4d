"""The plain Rich tables the views share: a titled table, and one that fits the width it is printed at."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from vlabench.cli.views.console import safe

READABLE = 20  # a wrapped column narrower than this reads like a word list


class PlainTable(Table):
    """A Rich table whose text is data: a title or cell given as ``str`` is shown as typed (control characters
    escaped, never parsed as markup, see ``console.safe``); style a cell by passing a ``Text``."""

    def __init__(self, *headers: Any, title: str | Text | None = None, **options: Any) -> None:
        super().__init__(*headers, title=safe(title) if isinstance(title, str) else title, **options)

    def add_row(self, *renderables: RenderableType | None, **options: Any) -> None:
        super().add_row(*(safe(cell) if isinstance(cell, str) else cell for cell in renderables), **options)


def titled_table(title: str, columns: list[str], numeric: Collection[str] = frozenset()) -> Table:
    """A left-titled table whose ``numeric`` columns are right-justified."""
    built = PlainTable(title=title, title_justify="left")
    for column in columns:
        built.add_column(column, justify="right" if column in numeric else "left")
    return built


class FittedTable:
    """A titled table that leaves out its least important columns until it fits the width it is printed at.

    ``keys`` are the columns holding what a user types next (a model, device or backend name): never wrapped, never
    cut. ``drop`` names the columns that may be left out, the first to go first; the others wrap at spaces. The fit is
    made when printing: a file or pipe (160 columns) gets every column, an 80-column terminal the ones that fit."""

    def __init__(
        self,
        title: str,
        columns: list[str],
        numeric: Collection[str] = frozenset(),
        keys: Collection[str] = frozenset(),
        drop: Sequence[str] = (),
    ) -> None:
        assert set(keys).isdisjoint(drop) and set(keys) | set(drop) <= set(columns)
        self.title, self.columns, self.numeric, self.keys, self.drop = title, columns, numeric, keys, drop
        self.rows: list[tuple[Text, ...]] = []

    def add_row(self, *cells: str | Text) -> None:
        """Cells given as ``str`` are data, shown as typed (``PlainTable``)."""
        self.rows.append(tuple(safe(cell) if isinstance(cell, str) else cell for cell in cells))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.fitted(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.fitted(options.max_width))

    def fitted(self, width: int) -> Table:
        """The table with every column, less the first of ``drop`` while it is wider than ``width``."""
        shown = list(self.columns)
        for column in self.drop:
            if self.narrowest(shown) <= width:
                break
            shown.remove(column)
        built = PlainTable(title=self.title, title_justify="left")
        for column in shown:
            key = column in self.keys
            justify = "right" if column in self.numeric else "left"
            built.add_column(
                column,
                justify=justify,
                no_wrap=key,
                min_width=self.needed(column) if key else None,
                overflow="ellipsis" if key else "fold",  # a long word in a reason is folded, never cut
            )
        for row in self.rows:
            built.add_row(*(row[self.columns.index(column)] for column in shown))
        return built

    def narrowest(self, shown: list[str]) -> int:
        """The least width of a readable table of the ``shown`` columns: key columns whole, the others whole up to
        READABLE cells and wrapped at spaces beyond (headers always wrap), a space either side of each cell and a
        border between them."""
        return sum(self.needed(column) for column in shown) + 3 * len(shown) + 1

    def needed(self, column: str) -> int:
        index = self.columns.index(column)
        cells = [row[index].plain for row in self.rows]
        whole = max(map(cell_len, cells), default=0)
        words = max(cell_len(word) for text in (column, *cells) for word in text.split() or [""])
        return max(whole, words) if column in self.keys else max(words, min(whole, READABLE))
