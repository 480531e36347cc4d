"""RoPE's cos and sin tabulated once (``RotaryTable``): the same values as computing them from the positions, in every
flow-matching replica however it is built (the compiled step is in tests/integration/models/test_rotary_compiled.py)."""

from __future__ import annotations

import pytest
import torch

from vlabench.models.replicas import build_replica
from vlabench.models.replicas.layers import ROPE_TABLE_POSITIONS, RotaryTable, rope_cos_sin
from vlabench.models.specs import load_model_spec

FLOW_FAMILIES = ["smolvla-tiny", "pi0-tiny", "pi05-tiny"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("head_dim", "theta"), [(64, 10000.0), (256, 10000.0), (128, 500000.0)])
def test_the_table_gives_rope_cos_sin_exactly(head_dim, theta, dtype):
    table = RotaryTable(head_dim, theta).to(dtype)
    table.reset_tables()
    positions = torch.tensor([[0, 5, 240, 290], [17, 17, 18, ROPE_TABLE_POSITIONS - 1]])
    for found, expected in zip(
        table(positions, ROPE_TABLE_POSITIONS, dtype), rope_cos_sin(positions, head_dim, theta, dtype), strict=True
    ):
        assert found.shape == expected.shape == (2, 1, 4, head_dim) and found.dtype == dtype
        assert torch.equal(found, expected)


def test_positions_past_the_table_are_computed_as_rope_cos_sin_does():
    table = RotaryTable(64, 10000.0, positions=8)
    positions = torch.arange(5, 12)[None]
    for found, expected in zip(
        table(positions, 12, torch.float32), rope_cos_sin(positions, 64, 10000.0, torch.float32), strict=True
    ):
        assert torch.equal(found, expected)


@pytest.mark.parametrize("name", FLOW_FAMILIES)
@pytest.mark.parametrize("streamed", [False, True])  # whole, or module by module through a transform
def test_every_flow_replica_fills_its_table_after_allocation(name, streamed):
    """``build_replica`` allocates on the meta device and then ``to_empty``: the table must be computed again."""
    spec = load_model_spec(name)
    model = build_replica(spec, 0, torch.bfloat16, torch.device("cpu"), (lambda _name, _m: None) if streamed else None)
    positions = torch.arange(ROPE_TABLE_POSITIONS)[None]
    cos, sin = rope_cos_sin(positions, spec.expert.head_dim, spec.llm.rope_theta, torch.bfloat16)
    assert torch.equal(model.expert_rope.cos, cos[0, 0]) and torch.equal(model.expert_rope.sin, sin[0, 0])
    assert "expert_rope.cos" not in model.state_dict()  # no checkpoint holds it
