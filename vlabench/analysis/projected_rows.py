"""The contract between the projection model and its readers (``vlabench project``, the leaderboard site).

A ``ProjectedRow`` is one (model, device, stack, precision) the profiles allow, projected, never measured: every
figure in it is labelled ``projected`` (latency) or ``estimated`` (energy). Its ``error_band`` is the grouped-CV band
of its stack on its device class (``analysis.projection_bands``: the split-conformal quantile of leave-one-source-out
errors, with the basis it was drawn from and the share of held-out entries it covered); a stack with fewer than three
published entries is ``uncalibrated`` and takes the band of every entry. Its energy band adds the idle power's
uncertainty where the profile cites none.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ProjectedRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: Literal["projected"] = "projected"
    model: str
    family: str
    device: str
    device_kind: str
    stack: str = Field(description="software stack the parameters were fitted for, e.g. pytorch-eager, tensorrt")
    precision: str
    cameras: int = Field(gt=0)
    steps: int = Field(gt=0)
    phases_ms: dict[Literal["vision", "prefill", "action", "e2e"], float] = Field(
        description="projected latency per phase; e2e is their sum"
    )
    kernel_counts: dict[str, int] = Field(description="kernels launched per phase, counted from the traced graph")
    power_mode: str | None = Field(default=None, description="the power mode projected (None: the profile's maximum)")
    error_band: float | None = Field(
        description="grouped-CV band: |reported - projected| / projected at band_quantile over held-out sources "
        "(None: no held-out entry to draw it from)"
    )
    # The band's provenance below defaults to None/False only for rows built by hand (tests, the site's fixtures);
    # ``analysis.projection.project_one`` always sets every field.
    band_quantile: float | None = Field(default=None, description="the quantile the band is (split-conformal)")
    band_basis: str | None = Field(
        default=None, description="the held-out entries the band is drawn from: a stack on a class, a stack, or all"
    )
    band_coverage: float | None = Field(
        default=None, description="share of held-out entries of that basis inside their band"
    )
    uncalibrated: bool = Field(
        default=False, description="the stack has fewer than 3 published entries: it takes every entry's band"
    )
    memory_needed_gb: float = Field(description="the model deployed by this stack at this precision")
    usable_memory_gb: float | None
    fits: bool | None
    joules_per_inference: float | None = Field(description="estimated: TDP x the utilization model")
    energy_label: Literal["estimated"] = "estimated"
    energy_method: str
    energy_band: float | None = Field(
        default=None, description="relative half-width of the energy: the latency band and idle's"
    )
    idle_w: float | None
    idle_source: str | None = Field(
        default=None, description="where idle_w comes from; 'estimated: ...' with its assumption"
    )
    price_usd: float | None
    price_source: str | None
    parameters_source: str = Field(description="where the stack's fitted parameters came from")
    inference_hz: float = Field(description="projected inferences per second (1 / e2e)")
    actions_per_chunk: int = Field(gt=0)
    usd_per_million_actions: float | None = Field(description="analysis.cet cost model on the estimated energy")
    share_of_peak: float = Field(description="the stack's fitted achieved share of the datasheet peak compute")
    share_of_bandwidth: float = Field(description="the stack's fitted achieved share of the datasheet bandwidth")
    dispatch_us: float = Field(description="the stack's fitted cost per kernel on the reference host")
    host_factor: float = Field(description="the device's host factor applied to the per-kernel cost")

    def band_ms(self) -> tuple[float, float]:
        """The projected e2e latency ± the stack's error band (the point itself when the stack has none)."""
        e2e, band = self.phases_ms["e2e"], self.error_band or 0.0
        return e2e * max(0.0, 1.0 - band), e2e * (1.0 + band)


def bands_overlap(a: ProjectedRow, b: ProjectedRow) -> bool:
    """Whether two projections' error bands overlap: then they are not ranked as different."""
    (low_a, high_a), (low_b, high_b) = a.band_ms(), b.band_ms()
    return low_a <= high_b and low_b <= high_a
