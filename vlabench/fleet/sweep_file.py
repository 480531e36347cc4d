"""Sweep files: a matrix of ``RunConfig`` settings, expanded into runs with a stable identity each."""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError, model_validator

from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.yaml_data import describe_validation, parse_yaml, read_text_file

OUTPUT_ONLY_FIELDS = frozenset({"out"})
"""RunConfig fields that say where a result goes, not what is measured: left out of a run's identity."""
ORDER_FIRST = ("model", "backend", "precision")
"""Axes that vary slowest, so consecutive runs reuse exported and compiled artifacts."""
PLACEMENT_PREFIX = "vlabench-device:"
MAX_TIMEOUT_S = 7 * 86_400.0
"""The longest per-run limit a sweep takes (a week): ``timeout_s`` and ``--timeout-s`` are 0 < x ≤ this."""
MAX_RETRIES = 100


class SweepDevice(BaseModel):
    """A ``device`` axis entry: the ``--device`` the run uses, and the Ray placement label it needs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="device profile or alias passed to `vlabench run --device`")
    placement: str | None = Field(
        default=None, description="Ray resource label (without the vlabench-device: prefix); default: name"
    )


def _unknown_keys(keys: set[str], where: str, extra: tuple[str, ...] = ()) -> str | None:
    valid = [*RunConfig.model_fields, *extra]
    unknown = sorted(keys - set(valid))
    if not unknown:
        return None
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
        hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return f"{where}: unknown setting {', '.join(hints)}; valid: {', '.join(valid)}"


class SweepFile(BaseModel):
    """The schema of ``vlabench sweep SWEEP.yaml``."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, description="a label for the sweep")
    out: Path = Field(default=Path("results"), description="results folder (`--out` overrides it)")
    timeout_s: StrictFloat | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT_S,
        allow_inf_nan=False,
        description="per-run wall-clock limit (`--timeout-s`); 0 < x ≤ 604800 s",
    )
    max_retries: StrictInt = Field(
        default=1, ge=0, le=MAX_RETRIES, description="Ray: reruns of a run whose node or worker died; 0 ≤ x ≤ 100"
    )
    fixed: dict[str, Any] = Field(default_factory=dict, description="RunConfig settings shared by every run")
    matrix: dict[str, list[Any]] = Field(default_factory=dict, description="RunConfig field -> values to sweep")
    exclude: list[dict[str, Any]] = Field(default_factory=list, description="partial settings; matching runs drop")

    @model_validator(mode="after")
    def _check_keys(self) -> SweepFile:
        problems = [
            _unknown_keys(set(self.fixed), "fixed"),
            _unknown_keys(set(self.matrix), "matrix"),
            *(_unknown_keys(set(rule), f"exclude[{i}]", ("placement",)) for i, rule in enumerate(self.exclude)),
        ]
        both = sorted(set(self.fixed) & set(self.matrix))
        if both:
            problems.append(f"{', '.join(both)}: set in both fixed and matrix; keep one")
        given_out = sorted(OUTPUT_ONLY_FIELDS & (set(self.fixed) | set(self.matrix)))
        if given_out:
            problems.append(f"{', '.join(given_out)}: set the results folder with the top-level `out` or --out")
        problems += [f"matrix.{key}: needs at least one value" for key, values in self.matrix.items() if not values]
        problems += [f"exclude[{i}]: empty rule would exclude every run" for i, r in enumerate(self.exclude) if not r]
        found = [p for p in problems if p]
        if found:
            raise ValueError("; ".join(found))
        return self


@dataclass(frozen=True)
class SweepRun:
    """One expanded run: its full config, where it must be placed on Ray, and its identity."""

    config: RunConfig
    placement: str | None
    axes: dict[str, Any]
    key: str

    @property
    def label(self) -> str:
        return " ".join(f"{name}={show_value(value)}" for name, value in self.axes.items()) or self.config.model

    @property
    def resource(self) -> str:
        """The Ray custom resource a node must hold to run this."""
        return PLACEMENT_PREFIX + (self.placement or self.config.device)


def show_value(value: Any) -> str:
    if isinstance(value, SweepDevice):
        return value.name + (f"@{value.placement}" if value.placement else "")
    return "-" if value is None else str(value)


def run_key(config: RunConfig, placement: str | None) -> str:
    """Identity of a run: its full config except output-only fields, and its placement label."""
    identity = {"config": config.model_dump(mode="json", exclude=set(OUTPUT_ONLY_FIELDS)), "placement": placement}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def load_sweep(path: Path) -> SweepFile:
    """Read and validate a sweep file; any problem (a FIFO, a directory, a binary, a duplicate key, an invalid
    setting) raises InputError naming the file and the setting."""
    return parse_sweep(read_text_file(path, "sweep file"), str(path))


def parse_sweep(text: str, origin: str) -> SweepFile:
    sweep = parse_yaml(text, SweepFile, origin, "sweep file")
    for key, values in sweep.matrix.items():
        for value in values:
            _validated_setting(origin, f"matrix.{key}", key, value)
    for key, value in sweep.fixed.items():
        _validated_setting(origin, f"fixed.{key}", key, value)
    for i, rule in enumerate(sweep.exclude):
        for key, value in rule.items():
            if key != "placement":
                _validated_setting(origin, f"exclude[{i}].{key}", key, value)
    return sweep


def _validated_setting(origin: str, where: str, key: str, value: Any) -> Any:
    """One setting checked against RunConfig (a device entry may be a {name, placement} mapping)."""
    if key == "device" and isinstance(value, dict):
        try:
            entry = SweepDevice.model_validate(value)
        except ValidationError as exc:
            raise InputError(f"{origin}: invalid {where} entry: {describe_validation(exc)}") from None
        _validated_setting(origin, where, key, entry.name)
        return entry
    try:
        return RunConfig.check_field(key, value)
    except ValidationError as exc:
        raise InputError(f"{origin}: invalid {where} value {value!r}: {describe_validation(exc)}") from None


def axis_order(matrix: dict[str, list[Any]]) -> list[str]:
    """Model, backend and precision vary slowest (artifact reuse), then the other axes in file order."""
    first = [name for name in ORDER_FIRST if name in matrix]
    return first + [name for name in matrix if name not in first]


MAX_RUNS = 10_000
"""The most runs a sweep's matrix may expand to (before exclusions): checked before expanding, so a matrix of
billions is refused at once, also with ``--dry-run``."""


def check_matrix_size(sweep: SweepFile, origin: str) -> None:
    sizes = {name: len(values) for name, values in sweep.matrix.items()}
    count = math.prod(sizes.values())
    if count > MAX_RUNS:
        axes = " × ".join(f"{size} {name}" for name, size in sizes.items())
        raise InputError(
            f"{origin}: the matrix expands to {count:,} runs ({axes}); a sweep takes at most {MAX_RUNS:,}: split it "
            "into several sweep files, or narrow the axes"
        )


def expand(sweep: SweepFile, origin: str = "sweep") -> list[SweepRun]:
    """Every run of the matrix, in execution order, minus exclusions and duplicates (at most MAX_RUNS)."""
    check_matrix_size(sweep, origin)
    names = axis_order(sweep.matrix)
    values = [[_validated_setting(origin, f"matrix.{n}", n, v) for v in sweep.matrix[n]] for n in names]
    fixed_device = sweep.fixed.get("device")
    fixed = dict(sweep.fixed)
    placement_fixed = None
    if isinstance(fixed_device, dict):
        entry = SweepDevice.model_validate(fixed_device)
        fixed["device"], placement_fixed = entry.name, entry.placement
    runs, seen = [], set()
    for combo in itertools.product(*values):
        axes = dict(zip(names, combo, strict=True))
        settings, placement = dict(fixed), placement_fixed
        for name, value in axes.items():
            if isinstance(value, SweepDevice):
                settings[name], placement = value.name, value.placement
            else:
                settings[name] = value
        try:
            config = RunConfig.model_validate(settings)
        except ValidationError as exc:
            shown = ", ".join(f"{k}={show_value(v)}" for k, v in axes.items())
            raise InputError(f"{origin}: run {shown} is invalid: {describe_validation(exc)}") from None
        _check_single_backend(origin, config)
        if any(_excluded(config, placement, rule) for rule in sweep.exclude):
            continue
        key = run_key(config, placement)
        if key not in seen:
            seen.add(key)
            runs.append(SweepRun(config, placement, axes, key))
    return runs


def _check_single_backend(origin: str, config: RunConfig) -> None:
    if config.backend == "all" or "," in config.backend:
        raise InputError(
            f"{origin}: backend '{config.backend}': a sweep run measures one backend; list them as matrix.backend"
        )


def _excluded(config: RunConfig, placement: str | None, rule: dict[str, Any]) -> bool:
    for key, value in rule.items():
        if key == "placement":
            if placement != value:
                return False
            continue
        if key == "device" and isinstance(value, dict):
            entry = SweepDevice.model_validate(value)
            if (config.device, placement) != (entry.name, entry.placement):
                return False
            continue
        if getattr(config, key) != RunConfig.check_field(key, value):
            return False
    return True
