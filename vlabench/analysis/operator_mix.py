"""A workload's operators on one device, reduced to what the projection model's roofline term needs.

The term is ``sum over operators of max(FLOPs / (peak × share), bytes / (bandwidth × bandwidth share))``: each
operator takes the longer of its compute and its memory time at the rates a stack achieves. Sorted by arithmetic
intensity (FLOPs / byte) with prefix sums of FLOPs and bytes, the sum takes one binary search for any pair of shares:
an operator is memory-bound exactly when its intensity is below ``peak × share / (bandwidth × bandwidth share)``.
The term never grows with peak or bandwidth, so a device at least as fast on paper is never projected slower.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

LOG_INTENSITY_LIMIT = 700.0
"""Operators with no bytes (or no FLOPs) sort last (or first): their log intensity is clipped to ±this."""


@dataclass(frozen=True, eq=False)
class OperatorMix:
    """Operators sorted by log arithmetic intensity, with prefix sums of FLOPs and bytes (one more entry than
    operators, starting at 0), and the device's peak (FLOP per ms) and bandwidth (bytes per ms)."""

    log_intensity: np.ndarray
    cum_flops: np.ndarray
    cum_bytes: np.ndarray
    peak: float
    bandwidth: float

    @classmethod
    def of(cls, flops: list[float], moved: list[float], peak_tflops: float, bandwidth_gbs: float) -> OperatorMix:
        """The mix of operators with these FLOPs and bytes on a device with this peak and bandwidth."""
        f, b = np.asarray(flops, dtype=float), np.asarray(moved, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_intensity = np.clip(np.log(f) - np.log(b), -LOG_INTENSITY_LIMIT, LOG_INTENSITY_LIMIT)
        log_intensity = np.where((f == 0) & (b == 0), 0.0, log_intensity)
        order = np.argsort(log_intensity, kind="stable")
        return cls(
            log_intensity=log_intensity[order],
            cum_flops=np.concatenate([[0.0], np.cumsum(f[order])]),
            cum_bytes=np.concatenate([[0.0], np.cumsum(b[order])]),
            peak=peak_tflops * 1e9,
            bandwidth=bandwidth_gbs * 1e6,
        )

    def floor_ms(self, share: float = 1.0, bandwidth_share: float = 1.0) -> float:
        """Sum over operators of max(FLOPs / (peak × share), bytes / (bandwidth × bandwidth share)), in ms."""
        rate, stream = self.peak * share, self.bandwidth * bandwidth_share
        split = int(np.searchsorted(self.log_intensity, np.log(rate / stream), side="left"))
        return (self.cum_flops[-1] - self.cum_flops[split]) / rate + self.cum_bytes[split] / stream

    def digest(self) -> str:
        """A hash of the operators and the ceiling, for cache keys."""
        digest = hashlib.sha256()
        for array in (self.log_intensity, self.cum_flops, self.cum_bytes, np.array([self.peak, self.bandwidth])):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


@dataclass(frozen=True, eq=False)
class MixStack:
    """Several mixes' operators in one array (mix i's log intensities shifted by i × a gap wider than their range),
    so that every mix's floor at its own shares takes one search: built once per fit, evaluated per iteration."""

    keys: np.ndarray
    cum_flops: np.ndarray
    cum_bytes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    peaks: np.ndarray
    bandwidths: np.ndarray

    GAP = 4 * LOG_INTENSITY_LIMIT

    @classmethod
    def of(cls, mixes: list[OperatorMix]) -> MixStack:
        sizes = np.array([m.log_intensity.size for m in mixes])
        ends = np.cumsum(sizes)
        flops = np.concatenate([np.diff(m.cum_flops) for m in mixes])
        moved = np.concatenate([np.diff(m.cum_bytes) for m in mixes])
        return cls(
            keys=np.concatenate([m.log_intensity + i * cls.GAP for i, m in enumerate(mixes)]),
            cum_flops=np.concatenate([[0.0], np.cumsum(flops)]),
            cum_bytes=np.concatenate([[0.0], np.cumsum(moved)]),
            starts=ends - sizes,
            ends=ends,
            peaks=np.array([m.peak for m in mixes]),
            bandwidths=np.array([m.bandwidth for m in mixes]),
        )

    def floors(self, shares: np.ndarray, bandwidth_shares: np.ndarray) -> np.ndarray:
        """``mixes[i].floor_ms(shares[i], bandwidth_shares[i])`` for every mix i."""
        compute, memory = self.parts(shares, bandwidth_shares)
        return compute + memory

    def parts(self, shares: np.ndarray, bandwidth_shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every mix's floor split into its compute-bound and its memory-bound operators' time (ms): each is
        inversely proportional to its achieved rate, which gives the fit its derivatives (the split moves only where
        an operator's two times are equal)."""
        rate, stream = self.peaks * shares, self.bandwidths * bandwidth_shares
        thresholds = np.log(rate / stream) + np.arange(rate.size) * self.GAP
        split = np.clip(np.searchsorted(self.keys, thresholds, side="left"), self.starts, self.ends)
        compute = (self.cum_flops[self.ends] - self.cum_flops[split]) / rate
        memory = (self.cum_bytes[split] - self.cum_bytes[self.starts]) / stream
        return compute, memory
