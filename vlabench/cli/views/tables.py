"""The plain Rich table the catalog, run, rank and loop views share."""

from __future__ import annotations

from rich.table import Table


def titled_table(title: str, columns: list[str], numeric: set[str] = frozenset()) -> Table:
    """A left-titled table whose ``numeric`` columns are right-justified."""
    built = Table(title=title, title_justify="left")
    for column in columns:
        built.add_column(column, justify="right" if column in numeric else "left")
    return built
