"""Relations between a result's figures (``results.relations``) on a fresh real run: it satisfies every one, and so
does every consistent variant of it hypothesis generates; tolerances cover timer granularity, not errors. The
impossible results, each breaking one relation, are forged in ``tests/support/forgeries.py`` and refused in
``test_forged_results.py``."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.result_variants import STATS, with_power, with_time_scaled
from vlabench.commands.run import execute, plan_run
from vlabench.measure.stats import summarize
from vlabench.results.schema import RunResult, write_result
from vlabench.results.validate import Requirements, validate_file

LOOSE = Requirements(min_iterations=1, min_duration_s=0, allow_dirty=True)


@pytest.fixture(scope="module")
def measured(fast_run) -> RunResult:
    """One real run of a tiny model with estimated energy, a price and an idle probe, so every block is present."""
    config = fast_run.config(
        model="pi0-tiny",
        min_iterations=3,
        energy_window_s=1,
        idle_window_s=0.1,
        idle_probe_s=0.05,
        price_usd=500,
        energy_meter="estimated",
    )
    return execute(plan_run(config))


def test_the_real_run_satisfies_every_relation(measured):
    assert measured.physical_problems() == []
    assert measured.energy is not None and measured.cost is not None and measured.timing.denoise_steps
    assert measured.cold_start.after_idle_ms is not None and measured.sustained is not None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    time_factor=st.floats(min_value=1e-2, max_value=1e2),
    power_factor=st.floats(min_value=1e-3, max_value=1.5),
    memory_share=st.floats(min_value=0.0, max_value=1.0),
)
def test_consistent_variants_always_pass(measured, tmp_path_factory, time_factor, power_factor, memory_share):
    """Faster or slower, hungrier or leaner, smaller or bigger within the device (and never below the weights it
    holds): every relation holds."""
    variant = with_power(with_time_scaled(measured, time_factor), power_factor)
    weights, device_bytes = variant.memory.weights_bytes, variant.device.memory_gb * 1e9
    peak = int(weights + (device_bytes - weights) * memory_share)
    variant = variant.model_copy(update={"memory": variant.memory.model_copy(update={"peak_rss_bytes": peak})})
    assert variant.physical_problems() == []
    path = write_result(variant, tmp_path_factory.mktemp("consistent"))
    assert validate_file(path, LOOSE) == []
    assert math.isfinite(variant.energy.joules_per_inference)


def test_relations_tolerate_timer_granularity_not_errors(measured):
    """A prefix 1% shorter than vision + prefill (rounding, timer granularity) passes, and so does one twice as long
    (the work between the two spans, preempted by other load); half of them does not fit them."""
    assert measured.timing.phases["prefix"].mean > 1.0  # the absolute tolerance cannot cover halving it
    for factor, passes in ((0.99, True), (2.0, True), (0.5, False)):
        samples = [value * factor for value in measured.timing.samples_ms["prefix"]]
        timing = measured.timing.model_copy(
            update={
                "samples_ms": {**measured.timing.samples_ms, "prefix": samples},
                "phases": {**measured.timing.phases, "prefix": summarize(samples)},
            }
        )
        result = measured.model_copy(update={"timing": timing})
        problems = [message for _, message in result.physical_problems() if message.startswith("prefix =")]
        assert (problems == []) == passes, (factor, problems)


def test_statistics_recomputed_from_samples_tolerate_float_rounding(measured):
    """Statistics whose every figure is one part in 10⁸ off those of their samples (another summation order) pass."""
    e2e = measured.timing.phases["e2e"]
    nudged = e2e.model_copy(update={key: getattr(e2e, key) * (1 + 1e-8) for key in STATS})
    timing = measured.timing.model_copy(update={"phases": {**measured.timing.phases, "e2e": nudged}})
    assert [p for p in measured.model_copy(update={"timing": timing}).physical_problems() if "samples" in p[1]] == []
