"""Percentiles with confidence: distribution-free order-statistic intervals, and the gate judging p99's upper end
(or the slowest sample, saying so, when the samples are too few to bound p99)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlabench.analysis.execution import ExecutionModel
from vlabench.measure.stats import order_statistic_interval, samples_to_bound, summarize
from vlabench.results.assemble import control_verdict


def test_the_median_interval_of_ten_samples_is_the_second_and_ninth():
    """The textbook distribution-free 95% interval of a median from 10 samples: X(2) to X(9) (97.9% coverage)."""
    assert order_statistic_interval(np.arange(1.0, 11.0), 0.5) == (2.0, 9.0)


@pytest.mark.parametrize(("q", "needed"), [(0.5, 6), (0.9, 36), (0.99, 368)])
def test_an_upper_end_exists_from_the_fewest_samples_whose_slowest_bounds_the_quantile(q, needed):
    assert samples_to_bound(q) == needed
    assert order_statistic_interval(np.arange(1.0, needed), q)[1] is None
    assert order_statistic_interval(np.arange(1.0, needed + 1.0), q)[1] == needed  # the slowest


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=400, max_value=1500), st.integers(min_value=0, max_value=2**31))
def test_the_p99_interval_covers_the_true_p99_about_95_times_in_100(n, seed):
    """Draws from a known distribution (exponential, p99 = ln 100): over 200 repetitions the interval holds the true
    quantile at least 90 times in 100 (95% nominal; order statistics are conservative)."""
    rng = np.random.default_rng(seed)
    truth = np.log(100.0)
    covered = 0
    for _ in range(200):
        low, high = order_statistic_interval(np.sort(rng.exponential(size=n)), 0.99)
        covered += low <= truth <= high
    assert covered >= 180


def test_the_gate_judges_the_upper_end_of_p99s_interval():
    """400 samples: 396 at 90 ms and 4 at 105 ms. The point p99 (90.15 ms) meets 10 Hz; the interval's upper end
    (105 ms) does not, and the verdict says what it judged."""
    e2e = summarize([90.0] * 396 + [105.0] * 4)
    assert e2e.p99 < 100.0 and e2e.intervals["p99"][1] == 105.0
    verdict = control_verdict(e2e, 10.0, ExecutionModel())
    assert not verdict.meets_target and verdict.reaction_ms == 105.0
    assert verdict.judged_on == "the upper end of p99's 95% interval" and "judged on the upper end" in verdict.reason


def test_with_too_few_samples_the_gate_judges_the_slowest_and_says_so():
    e2e = summarize([90.0] * 9 + [120.0])
    verdict = control_verdict(e2e, 10.0, ExecutionModel())
    assert e2e.intervals["p99"][1] is None and verdict.reaction_ms == 120.0 and not verdict.meets_target
    assert verdict.judged_on == "not enough samples for p99 (10 of the 368 a bound needs): the slowest sample"


def test_statistics_without_intervals_keep_their_point_p99():
    """Results of schema 1.2 and older have no intervals: their point p99 is judged, as when they were written."""
    old = summarize([90.0] * 9 + [120.0]).model_copy(update={"intervals": {}})
    assert old.judged_p99() == (old.p99, "p99")
