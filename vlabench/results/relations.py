"""Relations between a result's figures that every real measurement satisfies.

Each figure can be in range and the result still impossible: an end-to-end time shorter than its own action phase, a
megajoule per inference from a 12 W average over three seconds, a memory peak smaller than the weights, robots served
faster than the server's own inference. One model of a run ties the figures together: each derived figure is
computed again from the samples and the settings and compared within tolerance (``relation_terms``). A result that
breaks one is refused by every reader (``RunResult.physical_problems``), and the message names the rule
(docs/measurement.md lists them).

Each block's rules live in a module of their own; ``BLOCK_RULES`` lists them, so a new block (or new fields of one)
adds its module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable

from vlabench.results.clock_relations import (
    cold_start_relations,
    now_relations,
    pass_relations,
    window_relations,
)
from vlabench.results.cost_relations import control_relations, cost_relations
from vlabench.results.energy_relations import energy_relations, label_relations
from vlabench.results.memory_relations import memory_relations
from vlabench.results.relation_terms import Problems, RunResult
from vlabench.results.served_relations import serving_relations
from vlabench.results.serving_relations import serving_relations as served_load_relations
from vlabench.results.timing_relations import count_relations, duration_relations, phase_relations, sample_relations

BLOCK_RULES: tuple[Callable[[RunResult], Problems], ...] = (
    count_relations,
    sample_relations,
    phase_relations,
    duration_relations,
    now_relations,
    pass_relations,
    energy_relations,
    label_relations,
    memory_relations,
    control_relations,
    cost_relations,
    cold_start_relations,
    window_relations,
    serving_relations,
    served_load_relations,
)
"""Every block's rules, in the order their problems are listed (the first is the one a reader's message names)."""


def relation_problems(result: RunResult) -> Problems:
    """Every broken relation, as (field, "rule: what is wrong")."""
    return [problem for rules in BLOCK_RULES for problem in rules(result)]
