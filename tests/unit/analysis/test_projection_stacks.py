"""The stacks file: every stack a stack borrows from (its parent, the stack its shares come from) is another stack of
the file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vlabench.analysis.projection_stacks import Stacks


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
