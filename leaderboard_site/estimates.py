"""Leaderboard rows that were not measured by vlabench: roofline projections (``analysis.projection``) and published
figures (``profiles/reported``), each a full row wherever its inputs exist, labelled and cited."""

from __future__ import annotations

from functools import cache
from typing import Any

import vlabench
from vlabench.analysis.cet import CostAssumptions
from vlabench.analysis.projected_rows import ProjectedRow
from vlabench.analysis.projection_energy import idle_power
from vlabench.errors import InputError
from vlabench.hardware.devices import DeviceProfile, load_device_profile
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.vocab import Precision

from .reported import ReportedEntry
from .rows import cost_inputs, slug

STEPS = ("vision", "prefill", "action")
PROJECTED_P99 = "gated on the projected latency (no p99 is projected)"
REPORTED_P99 = "gated on the published latency (no p99 is published)"


@cache
def _profile(device: str) -> DeviceProfile | None:
    try:
        return load_device_profile(device)
    except InputError:
        return None


@cache
def _workload(model: str, cameras: int, steps: int) -> dict[str, int | None]:
    """The model's predicted chunk, the actions executed from it and its prompt tokens (None for a model no spec
    describes)."""
    try:
        workload = Workload.from_spec(load_model_spec(model), cameras, steps)
    except (InputError, ValueError):
        return {"chunk": None, "actions_per_chunk": None, "prompt_tokens": None}
    return {
        "chunk": workload.chunk,
        "actions_per_chunk": workload.actions_per_chunk,
        "prompt_tokens": workload.language_tokens,
    }


def projection_labels(projection: ProjectedRow) -> dict[str, Any]:
    """What a projected row says about its own reliability beyond its band: ``uncalibrated`` for a stack fitted on
    fewer than three published entries, and the band's coverage (the share of held-out published figures inside
    their band) with the entries it was drawn from."""
    return {
        "calibration": "uncalibrated" if projection.uncalibrated else None,
        "band_coverage": projection.band_coverage,
        "band_basis": projection.band_basis,
    }


def idle_w(profile: DeviceProfile) -> float | None:
    """The idle power the estimated energy assumes: the profile's cited one, else the projection's estimate
    (``analysis.projection_energy.idle_power``: its class's mean idle share of TDP)."""
    idle = idle_power(profile)
    return None if idle is None else idle.watts


def band_label(error_band: float | None) -> str | None:
    """The grouped-CV error band as the page shows it next to the badge, e.g. ``±18%``."""
    return None if error_band is None else f"±{error_band * 100:.0f}%"


def _common(model: str, device: str, precision: str, cameras: int, steps: int) -> dict[str, Any]:
    return {
        "run_id": None,
        "model": model,
        "device": device,
        "precision": precision,
        "optimizations": "none",
        "cameras": cameras,
        "steps": steps,
        **_workload(model, cameras, steps),
        "valid": True,
        "invalid_reason": None,
        "action_error": None,
        "action_error_note": "not measured",
        "approximate": Precision.is_quantized(precision),
        "group": "approximate" if Precision.is_quantized(precision) else "exact",
        "page": None,
        "device_class": _profile(device).device_class if _profile(device) else None,
        "deployment": "on-robot",
        "robots": 1,
        "model_page": f"models/{slug(model)}.html",
        "device_page": f"devices/{slug(device)}.html",
        "vlabench_version": vlabench.__version__,
    }


def projected_rows(projections: list[ProjectedRow]) -> list[dict[str, Any]]:
    """Unranked rows of roofline projections: latency projected, energy estimated, the stack's error band shown."""
    rows = []
    for p in projections:
        e2e = p.phases_ms["e2e"]
        rows.append(
            {
                **_common(p.model, p.device, p.precision, p.cameras, p.steps),
                "id": slug(f"projected {p.model} {p.device} {p.stack} {p.precision} {p.cameras} {p.steps}"),
                "kind": "projected",
                "provenance": "projected",
                "device_kind": p.device_kind,
                "backend": p.stack,
                "stack": f"{p.stack} (fitted parameters)",
                "date": None,
                "latency_p50_ms": e2e,
                "latency_p99_ms": e2e,
                "p99_note": PROJECTED_P99,
                "memory_needed_gb": p.memory_needed_gb,
                "device_memory_gb": p.usable_memory_gb,
                "energy_label": "estimated" if p.joules_per_inference is not None else None,
                **cost_inputs(p.joules_per_inference, p.idle_w, p.price_usd, p.price_source, CostAssumptions()),
                "error_band": p.error_band,
                "error_band_label": band_label(p.error_band),
                **projection_labels(p),
                "phases": {name: [p.phases_ms[name], None] for name in STEPS if name in p.phases_ms},
                "source": f"roofline projection ({p.energy_method} energy); parameters: {p.parameters_source}",
                "published_energy_kj": None,
            }
        )
    return rows


def reported_rows(entries: list[ReportedEntry], energies: dict[str, float | None]) -> list[dict[str, Any]]:
    """Published latencies as full rows: gated on the published latency, energy estimated (``energies``: J per
    inference by row id, from the device's power model) and cost from the device profile's price, with the citation.
    The published energy (kJ over a workload the source does not state) is shown as published, never divided."""
    rows = []
    for entry in entries:
        latency, energy = entry.latency, entry.energy
        e2e = latency.phases_ms["e2e"]
        sources = [latency.source] + ([energy.source] if energy and energy.source not in latency.source else [])
        row_id = reported_id(entry)
        profile = _profile(latency.device)
        joules = energies.get(row_id)
        price = profile.price if profile else None
        rows.append(
            {
                **_common(latency.model, latency.device, latency.precision, latency.cameras, latency.steps),
                **({"prompt_tokens": latency.prompt_tokens} if latency.prompt_tokens is not None else {}),
                "id": row_id,
                "kind": "reported",
                "provenance": "reported",
                "device_kind": profile.kind if profile else None,
                "backend": latency.stack,
                "stack": f"{latency.stack} (as published)",
                "date": None,
                "latency_p50_ms": e2e,
                "latency_p99_ms": e2e,
                "p99_note": REPORTED_P99,
                "memory_needed_gb": None,
                "device_memory_gb": None,
                "energy_label": "estimated" if joules is not None else None,
                **cost_inputs(
                    joules,
                    idle_w(profile) if profile else None,
                    price.usd if price else None,
                    f"{price.source}, {price.date}" if price else None,
                    CostAssumptions(),
                ),
                "error_band": None,
                "error_band_label": None,
                "phases": {name: [latency.phases_ms[name], None] for name in STEPS if name in latency.phases_ms},
                "source": "; ".join(sources),
                "assumed": list(latency.assumed) + ([] if latency.prompt_tokens is not None else ["prompt tokens"]),
                "published_energy_kj": energy.energy_kj if energy else None,
            }
        )
    return rows


def reported_id(entry: ReportedEntry) -> str:
    """The stable id (and URL fragment) of a published row: its workload and its source tell apart two figures of
    the same model, device and stack (another camera count, another publication)."""
    latency = entry.latency
    return slug(
        f"reported {latency.model} {latency.device} {latency.stack} {latency.precision} {latency.steps} "
        f"{latency.cameras} {latency.source}"
    )
