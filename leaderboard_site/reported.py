"""Published figures shown on the leaderboard as ``reported`` rows, each with its citation.

Latencies come from ``profiles/reported/latencies.yaml`` (``vlabench.analysis.reported``); published energies from
``profiles/reported/leaderboard.yaml``, each joined to exactly one of those latencies."""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel, ConfigDict, Field

from vlabench.analysis.reported import ReportedLatency, reported_latencies
from vlabench.errors import InputError
from vlabench.yaml_data import load_packaged


class ReportedEnergy(BaseModel):
    """A published energy figure, as published (the paper's kJ over an unstated workload)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    device: str
    stack: str
    steps: int = Field(gt=0)
    energy_kj: float = Field(gt=0)
    source: str


class ReportedEnergies(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: list[ReportedEnergy]


class ReportedEntry(BaseModel):
    """One published end-to-end latency, with the published energy of the same setting when there is one."""

    latency: ReportedLatency
    energy: ReportedEnergy | None


def _key(entry: ReportedLatency | ReportedEnergy) -> tuple[str, str, str, int]:
    return entry.model, entry.device, entry.stack, entry.steps


@cache
def reported_energies() -> list[ReportedEnergy]:
    return load_packaged("reported", "leaderboard", ReportedEnergies, "reported energies").entries


def reported_entries() -> list[ReportedEntry]:
    """Every published e2e latency, joined with its published energy; an energy matching no latency is an error."""
    latencies = [entry for entry in reported_latencies() if "e2e" in entry.phases_ms]
    energies: dict[tuple[str, str, str, int], ReportedEnergy] = {}
    for energy in reported_energies():
        matches = [latency for latency in latencies if _key(latency) == _key(energy)]
        if len(matches) != 1:
            raise InputError(
                f"profiles/reported/leaderboard.yaml: {_key(energy)} matches {len(matches)} e2e latencies in "
                "latencies.yaml (needs exactly one)"
            )
        energies[_key(energy)] = energy
    return [ReportedEntry(latency=latency, energy=energies.get(_key(latency))) for latency in latencies]
