"""The cheapest run that still measures, for tests that run a tiny model: one warm-up inference, two timed ones, no
minimum duration, one intra-op thread and no energy meter. Tests take it through the ``fast_run`` fixture."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vlabench.config import RunConfig

FLAGS = {
    "warmup": "--warmup",
    "min_iterations": "--min-iterations",
    "min_duration_s": "--min-duration",
    "threads": "--threads",
    "energy_meter": "--energy-meter",
}


@dataclass(frozen=True)
class FastRun:
    warmup: int = 1
    min_iterations: int = 2
    min_duration_s: float = 0.0
    threads: int = 1
    energy_meter: str = "none"

    def fields(self, **overrides) -> dict:
        """The run's settings as RunConfig fields; an override of None leaves that setting at its default."""
        merged = {**asdict(self), **overrides}
        return {name: value for name, value in merged.items() if value is not None}

    def config(self, **overrides) -> RunConfig:
        return RunConfig(**self.fields(**overrides))

    def args(self, **overrides) -> list[str]:
        """The same settings as command-line flags (a field without a flag, such as ``model``, is refused)."""
        return [
            part
            for name, value in self.fields(**overrides).items()
            for part in (FLAGS[name], f"{value:g}" if isinstance(value, float) else str(value))
        ]


FAST_RUN = FastRun()
"""The one instance: tests take it as the ``fast_run`` fixture; helpers that no fixture reaches import it."""
