"""Error bands of projected latencies, from the grouped (leave-one-source-out) validation, and their coverage.

A band is the split-conformal ``BAND_QUANTILE`` quantile of ``|reported - projected| / projected`` over held-out
e2e entries, so a projection ``p`` with band ``b`` reads ``[p × (1 - b), p × (1 + b)]``. It is drawn from the
entries of the row's stack on the row's device class when there are ``MIN_CELL`` of them, else from the stack's
entries, else from every entry; a pool is used only when its entries come from ``MIN_SOURCES`` sources or more, since
the entries of one source share its harness and err together (a pool of one source's entries is one observation of
how far a source may lie, not many). A stack with fewer than ``MIN_STACK_ENTRIES`` published entries of its own is
*uncalibrated*: it takes the band of every entry, never a tighter one of its own. A band's coverage is measured, not
assumed: each source is held out in turn, its entries are given the band computed without that source, and the
coverage is the share inside it.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from pydantic import BaseModel, Field

BAND_QUANTILE = 0.85
MIN_CELL = 5
MIN_STACK_ENTRIES = 3
MIN_SOURCES = 3
EVERY = "every entry"


class Band(BaseModel):
    """The band of one (stack, device class), where it comes from and how often it held on held-out sources."""

    value: float | None = Field(description="relative half-width; None: no held-out entry to draw it from")
    basis: str = Field(description="the held-out entries it is the quantile of")
    entries: int
    uncalibrated: bool = Field(description="the stack has fewer published entries than MIN_STACK_ENTRIES")
    coverage: float | None = Field(description="share of held-out entries of this basis inside their band")


def band_error(reported_ms: float, projected_ms: float) -> float:
    """How far a published latency lies from its projection, relative to the projection (the band's unit)."""
    return abs(reported_ms - projected_ms) / projected_ms


class BandTable(BaseModel):
    quantile: float = BAND_QUANTILE
    by_basis: dict[str, float] = Field(description="basis (a cell, a stack or every entry) -> band")
    counts: dict[str, int]
    sources: dict[str, int] = Field(description="basis -> the sources its held-out entries come from")
    stack_entries: dict[str, int] = Field(description="published e2e entries of each stack's own")
    coverage: dict[str, float] = Field(
        description="basis -> share of the held-out entries of its pool (a cell, a stack, all) inside their own band"
    )
    overall_coverage: float | None

    def basis(self, stack: str, device_class: str | None) -> str:
        if self.stack_entries.get(stack, 0) < MIN_STACK_ENTRIES:
            return EVERY
        cell = cell_key(stack, device_class)
        if device_class is not None and self._pooled(cell, MIN_CELL):
            return cell
        return stack if self._pooled(stack, MIN_STACK_ENTRIES) else EVERY

    def _pooled(self, basis: str, entries: int) -> bool:
        """The basis has ``entries`` held-out entries or more, from ``MIN_SOURCES`` sources or more."""
        return self.counts.get(basis, 0) >= entries and self.sources.get(basis, 0) >= MIN_SOURCES

    def band(self, stack: str, device_class: str | None = None) -> Band:
        basis = self.basis(stack, device_class)
        return Band(
            value=self.by_basis.get(basis),
            basis=basis,
            entries=self.counts.get(basis, 0),
            uncalibrated=self.stack_entries.get(stack, 0) < MIN_STACK_ENTRIES,
            coverage=self.coverage.get(basis),
        )


def cell_key(stack: str, device_class: str | None) -> str:
    return f"{stack} on {device_class}"


Row = tuple[str, str, float, str]
"""A held-out e2e entry's stack, device class, band error and source."""


def _quantiles(rows: list[Row]) -> dict:
    """The quantile, the entry count and the source count per basis: ``BandTable`` fields."""
    groups: dict[str, list[float]] = defaultdict(list)
    sources: dict[str, set[str]] = defaultdict(set)
    for stack, device_class, error, source in rows:
        for key in (cell_key(stack, device_class), stack, EVERY):
            groups[key].append(error)
            sources[key].add(source)
    return {
        "by_basis": {key: conformal_quantile(values) for key, values in groups.items()},
        "counts": {key: len(values) for key, values in groups.items()},
        "sources": {key: len(names) for key, names in sources.items()},
    }


def conformal_quantile(errors: list[float], quantile: float = BAND_QUANTILE) -> float:
    """The split-conformal quantile: the ⌈(n + 1) q⌉-th smallest of n held-out errors (the largest when that rank
    is past n), which a new exchangeable error stays under with probability at least q; a plain empirical
    quantile of a few errors undercovers."""
    ordered = sorted(errors)
    rank = int(np.ceil((len(ordered) + 1) * quantile))
    return float(ordered[min(rank, len(ordered)) - 1])


def band_table(scores: list, classes: dict[str, str]) -> BandTable:
    """The bands of held-out ``scores`` (``ProjectionScore``s; e2e ones count) with their nested coverage;
    ``classes`` maps each device to its class."""
    e2e = [s for s in scores if s.phase == "e2e"]
    rows = [
        (s.entry.stack, classes[s.entry.device], band_error(s.reported_ms, s.projected_ms), s.entry.source_group)
        for s in e2e
    ]
    stack_entries = defaultdict(int)
    for stack, _, _, _ in rows:
        stack_entries[stack] += 1
    table = BandTable(**_quantiles(rows), stack_entries=dict(stack_entries), coverage={}, overall_coverage=None)
    inside: dict[str, list[bool]] = defaultdict(list)
    for group in {s.entry.source_group for s in e2e}:
        others = [row for row, s in zip(rows, e2e, strict=True) if s.entry.source_group != group]
        held = table.model_copy(update=_quantiles(others))
        for (stack, device_class, error, _), score in zip(rows, e2e, strict=True):
            value = held.by_basis.get(held.basis(stack, device_class))
            if score.entry.source_group != group or value is None:
                continue
            for key in (cell_key(stack, device_class), stack, EVERY):
                inside[key].append(error <= value)
    table.coverage = {key: float(np.mean(flags)) for key, flags in inside.items()}
    table.overall_coverage = table.coverage.get(EVERY)
    return table
