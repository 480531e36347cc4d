"""Confidence intervals for success rates: Wilson's score interval for one rate, and Newcombe's hybrid score
interval for the difference of two rates measured on the same episodes (paired).

Wilson (1927): the p with |p̂ − p| ≤ z·sqrt(p(1 − p)/n), in closed form
    (p̂ + z²/2n ± z·sqrt(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n);
it stays inside [0, 1] and is not degenerate at 0 or n successes, unlike the Wald interval.

Newcombe (1998), "Improved confidence intervals for the difference between binomial proportions based on paired
data", Statistics in Medicine 17, method 10: with Wilson limits (l₁, u₁) of p₁ and (l₂, u₂) of p₂ and φ the
correlation of the paired outcomes (0 when a margin of the 2 × 2 table is empty),
    lower: θ − sqrt((p₁ − l₁)² − 2φ(p₁ − l₁)(u₂ − p₂) + (u₂ − p₂)²)
    upper: θ + sqrt((u₁ − p₁)² − 2φ(u₁ − p₁)(p₂ − l₂) + (p₂ − l₂)²)
for θ = p₁ − p₂; with φ = 0 it is the hybrid score interval for independent samples (Newcombe 1998, method 10).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for ``successes`` of ``trials`` (95% by default)."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes} of {trials}")
    p, z2 = successes / trials, z * z
    centre = p + z2 / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    scale = 1 + z2 / trials
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def hybrid_difference_interval(
    p1: float, limits1: tuple[float, float], p2: float, limits2: tuple[float, float], phi: float = 0.0
) -> tuple[float, float]:
    """Newcombe's interval for p1 − p2 from each rate's own interval and the outcomes' correlation ``phi``."""
    (l1, u1), (l2, u2) = limits1, limits2
    theta = p1 - p2
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    return max(-1.0, theta - math.sqrt(max(0.0, below))), min(1.0, theta + math.sqrt(max(0.0, above)))


def paired_phi(first: Sequence[bool], second: Sequence[bool]) -> float:
    """The correlation of two paired success sequences (the 2 × 2 table's φ); 0 when a margin is empty."""
    if len(first) != len(second):
        raise ValueError(f"paired outcomes of unequal length: {len(first)} and {len(second)}")
    both = sum(a and b for a, b in zip(first, second, strict=True))
    only_first = sum(a and not b for a, b in zip(first, second, strict=True))
    only_second = sum(b and not a for a, b in zip(first, second, strict=True))
    neither = len(first) - both - only_first - only_second
    margins = (both + only_first) * (only_second + neither) * (both + only_second) * (only_first + neither)
    return 0.0 if margins == 0 else (both * neither - only_first * only_second) / math.sqrt(margins)


def paired_difference(first: Sequence[bool], second: Sequence[bool], z: float = Z95) -> tuple[float, float, float]:
    """(rate of ``first`` − rate of ``second``, and its 95% interval) for outcomes of the same episodes."""
    phi = paired_phi(first, second)
    n = len(first)
    k1, k2 = sum(map(bool, first)), sum(map(bool, second))
    low, high = hybrid_difference_interval(k1 / n, wilson_interval(k1, n, z), k2 / n, wilson_interval(k2, n, z), phi)
    return k1 / n - k2 / n, low, high
