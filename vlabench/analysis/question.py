"""One question of the leaderboard: one model at one workload (cameras, denoising steps, prompt tokens), a control
rate, an execution model and a CET priority, over the rows the reader keeps (device class, deployment, provenance).
Every rank, tie and Pareto mark is computed within one question (DESIGN.md, "One question at a time"): a row of
another model or workload is never ranked against it. ``vlabench rank`` and the site share this code; the site's
script (``leaderboard_site/assets/leaderboard.js``) mirrors ``rank_question`` and ``band_ties`` step by step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from vlabench.analysis.cet import ELECTRICITY_ONLY, PRIORITY_COLUMNS, ExecutionModel, Priority, rank

WORKLOAD_COLUMNS = ("cameras", "steps", "prompt_tokens")
QUESTION_COLUMNS = ("model", *WORKLOAD_COLUMNS)
OWN_EXECUTION = ("served", "offload")
"""Deployments whose latency its robots measured while asking under their own execution model: such a row is gated
under that model whatever the question's (the queueing it saw depends on it)."""


def question_of(row: Mapping[str, Any]) -> tuple:
    """The (model, cameras, steps, prompt tokens) a row answers."""
    return tuple(row[column] for column in QUESTION_COLUMNS)


def workload_label(cameras: int, steps: int, prompt_tokens: int) -> str:
    """``1 camera · 10 steps · 48 prompt tokens``."""

    def plural(count: int, noun: str) -> str:
        return f"{count} {noun}{'' if count == 1 else 's'}"

    return f"{plural(cameras, 'camera')} · {plural(steps, 'step')} · {plural(prompt_tokens, 'prompt token')}"


def figure(row: Mapping[str, Any], priority: str) -> Any:
    """A ranked row's priority figure: for cost, the basis its group is ranked on (``cet.rank``'s ``cost_basis``)."""
    if priority == "cost" and row.get("cost_basis") == "electricity-only":
        return row[ELECTRICITY_ONLY]
    return row[PRIORITY_COLUMNS[priority]]


def _band(row: Mapping[str, Any]) -> float | None:
    band = row.get("error_band")
    return None if band is None or pd.isna(band) else float(band)


def bands_overlap(a: Mapping[str, Any], b: Mapping[str, Any], priority: str) -> bool:
    """Whether two rows' intervals on the priority figure overlap: a projection is its value ± its error band, a
    measured or published row its value alone; at least one of the two needs a band."""
    band_a, band_b = _band(a), _band(b)
    if band_a is None and band_b is None:
        return False
    value_a, value_b = figure(a, priority), figure(b, priority)
    low_a, high_a = value_a * max(0.0, 1 - (band_a or 0.0)), value_a * (1 + (band_a or 0.0))
    low_b, high_b = value_b * max(0.0, 1 - (band_b or 0.0)), value_b * (1 + (band_b or 0.0))
    return low_a <= high_b and low_b <= high_a


def band_ties(frame: pd.DataFrame, priority: Priority, approximate_separately: bool = True) -> pd.DataFrame:
    """Competition ranks, group by group, over ``cet.rank``'s numbering: a ranked row shares the rank of the row
    ranked just above it when both have the same priority figure and p50 latency, or when their intervals on the
    priority figure overlap (``bands_overlap``); otherwise its rank is its place. Adds ``tied`` (the row shares its
    rank) and ``tied_with`` (the row above it it is not ranked apart from: its device and backend)."""
    frame = frame.copy()
    frame["tied"] = False
    frame["tied_with"] = None
    groups = frame["group"] if approximate_separately else pd.Series("all", index=frame.index)
    for _, members in frame[frame["rank"].notna()].groupby(groups, sort=False):
        previous, previous_rank = None, 0
        for place, (index, row) in enumerate(members.sort_values("rank", kind="stable").iterrows(), start=1):
            same = previous is not None and (
                (figure(previous, priority), previous["latency_p50_ms"])
                == (figure(row, priority), row["latency_p50_ms"])
            )
            tied = previous is not None and (same or bands_overlap(previous, row, priority))
            current = previous_rank if tied else place
            frame.at[index, "rank"] = current
            if tied:
                frame.at[index, "tied"] = True
                frame.at[previous.name, "tied"] = True
                frame.at[index, "tied_with"] = f"{previous['device']} ({previous['backend']})"
            previous, previous_rank = row, current
    return frame


def rank_question(
    frame: pd.DataFrame,
    priority: Priority,
    control_hz: float,
    execution: ExecutionModel,
    approximate_separately: bool = True,
) -> pd.DataFrame:
    """``cet.rank`` over the rows of one question (ValueError for rows of several), on-robot rows judged under
    ``execution`` and served or offload rows (column ``deployment``) under the execution their robots were measured
    with (columns ``execution`` and ``actions_per_chunk``); then ``band_ties``. Every provenance ranks together,
    each row with its label; approximate rows apart unless ``approximate_separately`` is false."""
    if frame.empty:
        return frame
    questions = {question_of(row) for row in frame.to_dict("records")}
    if len(questions) > 1:
        raise ValueError(f"rows of {len(questions)} questions cannot be ranked together: {sorted(questions)}")
    frame = frame.reset_index(drop=True).copy()
    own = frame["deployment"].isin(OWN_EXECUTION) if "deployment" in frame else pd.Series(False, index=frame.index)
    frame["execution"] = frame["execution"].astype(object) if "execution" in frame else None
    frame.loc[~own, "execution"] = execution.mode
    frame.loc[~own, "actions_per_chunk"] = execution.actions_per_inference
    ranked = rank(frame, priority, control_hz, execution=None, approximate_separately=approximate_separately)
    return band_ties(ranked, priority, approximate_separately)
