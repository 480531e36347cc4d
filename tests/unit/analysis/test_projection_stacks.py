"""The stacks file: every stack a stack borrows from (its parent, the stack its shares come from) is another stack of
the file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vlabench.analysis.projection_stacks import Stacks, stacks
from vlabench.analysis.reported import ReportedLatency


def stack(name: str, borrows: list[str], shares_from: str | None = None) -> dict:
    return {
        "name": name,
        "backend": None,
        "kernel_scheme": "fused",
        "host_bound": False,
        "borrows": borrows,
        "shares_from": shares_from,
        "rationale": "a test stack",
    }


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ([stack("root", []), stack("child", ["missing"])], "'missing'"),
        ([stack("root", []), stack("child", ["root"], shares_from="typo")], "'typo'"),
        ([stack("root", ["root"])], "'root'"),
    ],
)
def test_a_stack_borrowing_from_no_other_stack_is_refused(entries, named):
    with pytest.raises(ValidationError, match=named):
        Stacks.model_validate({"stacks": entries})


def published(**fields) -> dict:
    entry = {"model": "pi0", "device": "rtx-4090", "precision": "bf16", "cameras": 1, "steps": 10}
    return entry | {"stack": "pytorch-eager", "phases_ms": {"e2e": 100.0}, "source": "a test source"} | fields


@pytest.mark.parametrize(
    ("fields", "suggested"),
    [({"stack": "tensort"}, "'tensorrt'"), ({"phase_stacks": {"action": "ggmll"}}, "'ggml'")],
)
def test_a_published_entry_names_a_stack_of_the_stacks_file(fields, suggested):
    """Stacks are data: an entry's stack (and each phase's) must be in stacks.yaml, and a typo names the closest."""
    with pytest.raises(ValidationError, match=f"Did you mean {suggested}"):
        ReportedLatency.model_validate(published(**fields))


def test_every_stack_of_the_stacks_file_can_be_named_by_a_published_entry():
    for name in stacks():
        assert ReportedLatency.model_validate(published(stack=name)).stack == name
