"""Success-rate intervals: Wilson's for one rate, Newcombe's hybrid score interval for a difference, checked against
published values and against scipy's independent implementation of Wilson's."""

from __future__ import annotations

import itertools

import pytest
from scipy.stats import binomtest

from vlabench.measure.proportions import hybrid_difference_interval, paired_difference, paired_phi, wilson_interval


# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Statistics in Medicine 17, Table II:
# the Wilson score interval (method 3) of 81/263, 15/148, 0/20 and 1/29.
@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_matches_newcombes_published_intervals(successes, trials, low, high):
    assert wilson_interval(successes, trials) == pytest.approx((low, high), abs=5e-5)


@pytest.mark.parametrize(("successes", "trials"), [(0, 1), (1, 1), (3, 7), (49, 50), (250, 250), (17, 250)])
def test_wilson_agrees_with_scipy(successes, trials):
    expected = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(successes, trials) == pytest.approx((expected.low, expected.high), abs=1e-9)


@pytest.mark.parametrize(("successes", "trials"), [(-1, 5), (6, 5), (0, 0)])
def test_wilson_refuses_impossible_counts(successes, trials):
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(successes, trials)


def test_the_independent_hybrid_interval_matches_newcombes_example():
    # Newcombe (1998), "Interval estimation for the difference between independent proportions", Statistics in
    # Medicine 17, example (a): 56/70 − 48/80 = 0.2000, method 10 gives 0.0524 to 0.3339.
    interval = hybrid_difference_interval(56 / 70, wilson_interval(56, 70), 48 / 80, wilson_interval(48, 80))
    assert interval == pytest.approx((0.0524, 0.3339), abs=5e-5)


def test_paired_phi_is_the_two_by_two_correlation():
    assert paired_phi([True, True, False, False], [True, True, False, False]) == pytest.approx(1.0)
    assert paired_phi([True, False, True, False], [False, True, False, True]) == pytest.approx(-1.0)
    assert paired_phi([True, True, True], [True, False, True]) == 0.0  # a margin is empty
    with pytest.raises(ValueError, match="unequal"):
        paired_phi([True], [True, False])


def test_the_paired_interval_holds_its_point_and_narrows_with_correlation():
    first = [True] * 40 + [False] * 10
    aligned = [True] * 35 + [False] * 15  # fails where the first fails, and 5 more
    shuffled = [True] * 30 + [False] * 10 + [True] * 5 + [False] * 5  # 35 of 50 too, 5 where the first fails
    paired = paired_difference(first, aligned)
    scattered = paired_difference(first, shuffled)
    assert paired[0] == pytest.approx(0.1) == scattered[0]
    assert paired[1] < 0.1 < paired[2]
    assert paired[2] - paired[1] < scattered[2] - scattered[1]


def test_a_policy_that_always_fails_is_significantly_worse_on_fifty_episodes():
    reference, broken = [True] * 45 + [False] * 5, [False] * 50
    difference, _, high = paired_difference(broken, reference)
    assert difference == pytest.approx(-0.9) and high < 0
    assert wilson_interval(0, 50)[1] < wilson_interval(45, 50)[0]


@pytest.mark.parametrize("outcomes", list(itertools.product([True, False], repeat=4)))
def test_every_small_paired_interval_is_ordered_and_bounded(outcomes):
    first, second = list(outcomes[:2]) * 2, list(outcomes[2:]) * 2
    difference, low, high = paired_difference(first, second)
    assert -1.0 <= low <= difference <= high <= 1.0
