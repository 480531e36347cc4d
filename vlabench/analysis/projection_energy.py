"""Estimated energy of a projected inference: ``P = idle + (TDP - idle) × utilization`` over the projected latency,
with the idle power each device profile cites, or, where no source states one, an estimate shown as such whose
uncertainty widens the energy band."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean

from vlabench.hardware.devices import DeviceProfile, all_profiles

IDLE_SPREAD = 2.0
"""An estimated idle power is taken to lie within a factor of this either way (half to double)."""


@dataclass(frozen=True)
class IdlePower:
    watts: float
    source: str
    estimated: bool = False
    spread: float = 1.0


def _sourced_shares(device_class: str | None) -> list[tuple[str, float]]:
    return [
        (p.name, p.idle_w.value / p.tdp_w.value)
        for p in all_profiles()
        if p.idle_w is not None and p.tdp_w is not None and device_class in (None, p.device_class)
    ]


def idle_power(profile: DeviceProfile) -> IdlePower | None:
    """The profile's cited idle power, else an estimate: its TDP times the mean idle share of the profiles of its
    class that cite one (of every profile citing one when none of its class does). None without a TDP."""
    if profile.tdp_w is None:
        return None
    if profile.idle_w is not None:
        return IdlePower(profile.idle_w.value, f"profile: {profile.idle_w.source}")
    shares = _sourced_shares(profile.device_class) or _sourced_shares(None)
    if not shares:
        return None
    share = mean(value for _, value in shares)
    names = ", ".join(f"{name} {value:.1%}" for name, value in shares)
    return IdlePower(
        share * profile.tdp_w.value,
        f"estimated: no cited idle power; {share:.1%} of its {profile.tdp_w.value:g} W TDP, the mean idle share of "
        f"the profiles citing one ({names}), taken as uncertain within ×{IDLE_SPREAD:g} either way",
        estimated=True,
        spread=IDLE_SPREAD,
    )


def joules(tdp_w: float, idle_w: float, latency_ms: float, utilization: float) -> float:
    """J of one inference under the linear power model."""
    watts = idle_w + (tdp_w - idle_w) * min(1.0, max(0.0, utilization))
    return watts * latency_ms / 1e3


def energy_band(latency_band: float | None, tdp_w: float, idle: IdlePower, latency_ms: float, busy: float) -> float:
    """Relative half-width of the energy estimate: the latency band, widened by the idle power's uncertainty."""
    central = joules(tdp_w, idle.watts, latency_ms, busy)
    extremes = [joules(tdp_w, min(tdp_w, idle.watts * f), latency_ms, busy) for f in (1 / idle.spread, idle.spread)]
    idle_band = max(abs(value - central) / central for value in extremes)
    return (1 + (latency_band or 0.0)) * (1 + idle_band) - 1
