"""The cheapest run that still measures, for tests that run a tiny model: one warm-up inference, two timed ones, no
minimum duration, one intra-op thread and no energy meter. Tests take it through the ``fast_run`` fixture."""

from __future__ import annotations

from vlabench.config import RunConfig

SETTINGS = {"warmup": 1, "min_iterations": 2, "min_duration_s": 0.0, "threads": 1, "energy_meter": "none"}
"""RunConfig field -> value; FLAGS names each field's command-line flag."""
FLAGS = {name: "--" + name.removesuffix("_s").replace("_", "-") for name in SETTINGS}


class FastRun:
    """SETTINGS as RunConfig fields, a RunConfig or command-line flags; keyword overrides change a setting or add a
    field (None leaves a setting at its default)."""

    def fields(self, **overrides) -> dict:
        merged = {**SETTINGS, **overrides}
        return {name: value for name, value in merged.items() if value is not None}

    def config(self, **overrides) -> RunConfig:
        return RunConfig(**self.fields(**overrides))

    def args(self, **overrides) -> list[str]:
        """The settings as flags (a field without a flag, such as ``model``, is refused)."""
        return [
            part
            for name, value in self.fields(**overrides).items()
            for part in (FLAGS[name], f"{value:g}" if isinstance(value, float) else str(value))
        ]


FAST_RUN = FastRun()
"""The one instance: tests take it as the ``fast_run`` fixture; helpers that no fixture reaches import it."""
