"""``RunPlan.at``: a plan re-plans itself at another precision or batch, as ``plan_run`` would have planned it."""

from __future__ import annotations

from vlabench.commands.run import plan_run
from vlabench.config import RunConfig

BASE = {"model": "smolvla-tiny", "energy_meter": "none"}


def test_a_plan_at_another_precision_is_the_plan_run_would_make():
    auto = plan_run(RunConfig(**BASE, precision="auto"))
    direct = plan_run(RunConfig(**BASE, precision="bf16"))
    at = auto.at(precision="bf16")
    assert (auto.precision, auto.config.precision) == ("fp32", "auto")  # the original is left as it was
    assert (at.precision, at.config.precision) == ("bf16", "bf16")
    assert at.footprint == direct.footprint and at.footprint.total_bytes < auto.footprint.total_bytes
    assert at.caveats == direct.caveats and at.workload == direct.workload


def test_a_plan_at_another_batch_keeps_its_precision():
    plan = plan_run(RunConfig(**BASE, precision="fp32", batch=4))
    direct = plan_run(RunConfig(**BASE, precision="fp32", batch=2))
    at = plan.at(batch=2)
    assert at.workload == direct.workload and at.config.batch == 2 and at.precision == "fp32"
    assert at.footprint == direct.footprint and at.footprint.total_bytes < plan.footprint.total_bytes
    assert plan.workload.batch == 4
