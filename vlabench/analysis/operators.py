"""The unit of every FLOP and byte count: an operator of one phase, and totals over operators."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pydantic import BaseModel

from vlabench.vocab import ModelPhase


class Totals(BaseModel):
    """FLOPs and bytes moved, split by kind."""

    flops: float = 0.0
    weight_bytes: float = 0.0
    activation_bytes: float = 0.0
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def intensity(self) -> float:
        """FLOP per byte moved."""
        return self.flops / self.bytes if self.bytes else 0.0


class Operator(Totals):
    """One operator of one phase (``denoise_step`` figures are per step)."""

    phase: ModelPhase
    block: str  # vision, connector, llm, expert, head
    layer: int | None
    name: str


AMOUNTS = tuple(Totals.model_fields)


def total(operators: Iterable[Totals]) -> Totals:
    ops = list(operators)
    return Totals(**{field: sum(getattr(op, field) for op in ops) for field in AMOUNTS})


def by_layer(operators: Iterable[Operator]) -> dict[tuple[ModelPhase, str, int | None], Totals]:
    """Totals per (phase, block, layer), in first-seen order."""
    groups: dict[tuple[ModelPhase, str, int | None], list[Operator]] = defaultdict(list)
    for op in operators:
        groups[(op.phase, op.block, op.layer)].append(op)
    return {key: total(ops) for key, ops in groups.items()}
