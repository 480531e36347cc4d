"""The site's rows ranked question by question (``analysis.question.rank_question``: one model at one workload, at
one target, execution model and priority; never across models or workloads), and the reader's filters that make a
question. ``assets/leaderboard.js`` recomputes the same in the page at the reader's settings; ``vlabench rank``
prints it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from vlabench.analysis.cet import PRIORITY_COLUMNS, ExecutionModel, Priority
from vlabench.analysis.question import WORKLOAD_COLUMNS, question_of, rank_question, workload_label
from vlabench.errors import InputError, unknown_name
from vlabench.models.specs import load_model_spec, model_names
from vlabench.models.workload import Workload

from .board import load_board
from .rows import clean

PROVENANCE_CLASSES = {"measured": ("measured", "estimated"), "projected": ("projected",), "reported": ("reported",)}
"""The provenance a reader keeps or drops, and the row labels each covers (a run with estimated energy is measured)."""
FIGURES = dict.fromkeys(
    (
        "joules_per_action",
        "usd_per_million_actions",
        "usd_per_million_actions_electricity_only",
        "usd_per_robot_hour",
        "usd_per_robot_hour_electricity_only",
    )
)
"""The figures ``cet.rank`` fills in from the cost inputs where a row has them."""


@dataclass(frozen=True)
class Filters:
    """The rows a reader keeps in a question: device classes, deployments, provenance classes (None: all)."""

    device_classes: tuple[str, ...] | None = None
    deployments: tuple[str, ...] | None = None
    provenance: tuple[str, ...] | None = None

    def keeps(self, row: dict[str, Any]) -> bool:
        kept = {label for name in self.provenance or PROVENANCE_CLASSES for label in PROVENANCE_CLASSES[name]}
        return (
            (self.device_classes is None or row.get("device_class") in self.device_classes)
            and (self.deployments is None or row.get("deployment", "on-robot") in self.deployments)
            and row["provenance"] in kept
        )


def canonical_workloads(rows: Iterable[dict[str, Any]], defaults: dict[str, tuple]) -> dict[str, tuple]:
    """Per model, the workload its questions default to: the model's own (its spec's cameras, steps and prompt,
    ``defaults``) when a row has it, else the workload with the most rows (the smallest on a tie)."""
    counts: dict[str, Counter] = {}
    for row in rows:
        counts.setdefault(row["model"], Counter())[tuple(row[c] for c in WORKLOAD_COLUMNS)] += 1
    chosen = {}
    for model, workloads in counts.items():
        own = defaults.get(model)
        chosen[model] = own if own in workloads else min(workloads, key=lambda w: (-workloads[w], w))
    return chosen


def question_label(model: str, workload: tuple) -> str:
    return f"{model} · {workload_label(*workload)}"


def rank_rows(
    rows: list[dict[str, Any]],
    priority: Priority,
    control_hz: float,
    execution: ExecutionModel,
    filters: Filters | None = None,
    approximate_separately: bool = True,
) -> list[dict[str, Any]]:
    """Every row a filter keeps, ranked within its question (``rank_question``); question by question (in the
    order of their first row), in each the ranked rows by rank, then the unranked ones. Each row gains
    ``question`` (its label) and the gate, cost, rank, tie and Pareto columns."""
    filters = filters or Filters()
    questions: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        if filters.keeps(row):
            questions.setdefault(question_of(row), []).append(row)
    ranked = []
    for key, members in questions.items():
        frame = pd.DataFrame([{**FIGURES, **row} for row in members])
        frame = rank_question(frame, priority, control_hz, execution, approximate_separately)
        label = question_label(key[0], key[1:])
        for record in frame.to_dict(orient="records"):
            row = {name: clean(value) for name, value in record.items()}
            row.update(
                question=label,
                rank=None if row["rank"] is None else int(row["rank"]),
                pareto=bool(row["pareto"]),
                feasible=bool(row["feasible"]),
                tied=bool(row["tied"]),
            )
            ranked.append(row)
    return ranked


DEPLOYMENTS = ("on-robot", "served", "offload")


def model_defaults() -> dict[str, tuple]:
    """Each packaged model's own workload (its spec's cameras, steps and prompt tokens)."""
    defaults = {}
    for name in model_names():
        workload = Workload.from_spec(load_model_spec(name))
        defaults[name] = (workload.cameras, workload.steps, workload.language_tokens)
    return defaults


@dataclass(frozen=True)
class Question:
    """What ``vlabench rank`` is asked: a model (None: every model) at a workload (each knob None: the model's
    default workload's), or every workload; the target, execution model and priority; the rows kept."""

    model: str | None = None
    workload: tuple[int | None, int | None, int | None] = (None, None, None)
    all_workloads: bool = False
    priority: Priority = "cost"
    control_hz: float = 10.0
    execution: ExecutionModel = field(default_factory=ExecutionModel)
    device_classes: list[str] | None = None
    deployments: list[str] | None = None
    provenance: list[str] | None = None
    approximate_together: bool = False


@dataclass
class RankedBoard:
    """Each question's rows (by its label, in order), ranked; the input files passed over and why."""

    questions: dict[str, list[dict[str, Any]]]
    skipped: list[str]


def _check(kind: str, names: list[str] | None, valid: Iterable[str]) -> tuple[str, ...] | None:
    valid = sorted(set(valid))
    for name in names or []:
        if name not in valid:
            raise unknown_name(kind, name, valid)
    return tuple(names) if names else None


def rank_board(
    paths: list[Path], question: Question, published: bool, projected: bool, include_partial: bool = False
) -> RankedBoard:
    """The rows of ``paths`` (none: the bundled board), each model's question (or ``question.model``'s) at its
    workload, ranked within the question (``rank_rows``); unknown names list the valid ones, and a question no row
    answers is an input error naming the workloads that have rows."""
    if question.priority not in PRIORITY_COLUMNS:
        raise unknown_name("priority", question.priority, PRIORITY_COLUMNS)
    board = load_board(
        paths,
        question.control_hz,
        projected=projected,
        published=published,
        latest_only=False,
        include_partial=include_partial,
    )
    rows = board.rows
    if question.model is not None:
        models = {row["model"] for row in rows}
        if question.model not in models:
            raise unknown_name("model", question.model, models)
        rows = [row for row in rows if row["model"] == question.model]
    filters = Filters(
        _check("device class", question.device_classes, (r["device_class"] for r in rows if r.get("device_class"))),
        _check("deployment", question.deployments, DEPLOYMENTS),
        _check("provenance", question.provenance, PROVENANCE_CLASSES),
    )
    canonical = canonical_workloads(rows, model_defaults())
    if not question.all_workloads:
        wanted = {
            model: tuple(
                mine if mine is not None else own for mine, own in zip(question.workload, default, strict=True)
            )
            for model, default in canonical.items()
        }
        answered = [row for row in rows if tuple(row[c] for c in WORKLOAD_COLUMNS) == wanted[row["model"]]]
        if not answered:
            have = sorted({workload_label(*(row[c] for c in WORKLOAD_COLUMNS)) for row in rows})
            raise InputError(
                f"no row answers {', '.join(question_label(m, w) for m, w in wanted.items())}; "
                f"workloads with rows: {'; '.join(have)}"
            )
        rows = answered
    ranked = rank_rows(
        rows,
        question.priority,
        question.control_hz,
        question.execution,
        filters,
        approximate_separately=not question.approximate_together,
    )
    questions: dict[str, list[dict[str, Any]]] = {}
    for row in ranked:
        questions.setdefault(row["question"], []).append(row)
    return RankedBoard(questions=questions, skipped=board.skipped)
