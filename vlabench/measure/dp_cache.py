"""DP-Cache schedules: which denoising steps are computed; a skipped step reuses the latest computed velocity.

Given as an explicit set (``{0,1,2,6,8,9}``, ``0,1,2,6,8,9``), as a stable middle segment with a stride
(``segment:3-7/2``: inside steps 3..7 only every 2nd step is computed, counting from 3), or as a file written by
``vlabench calibrate dp-cache``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vlabench.atomic import atomic_write_text
from vlabench.errors import InputError
from vlabench.yaml_data import read_text_file

MAX_SCHEDULE_BYTES = 2**20
"""A schedule (or the calibration artifact holding one) is a few kB."""
_SEGMENT = re.compile(r"^segment:(\d+)-(\d+)(?:/(\d+))?$")


class DPCacheSchedule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(gt=0)
    computed: tuple[int, ...] = Field(description="step indices that call the action expert; step 0 always")
    source: str = Field(default="", description="how the schedule was chosen (a set, a segment, a calibration)")
    calibration: dict | None = Field(default=None, description="what `vlabench calibrate dp-cache` measured")

    @model_validator(mode="after")
    def _check(self) -> DPCacheSchedule:
        if list(self.computed) != sorted(set(self.computed)):
            raise ValueError("computed steps must be sorted and distinct")
        if not self.computed or self.computed[0] != 0:
            raise ValueError("step 0 must be computed (there is no earlier velocity to reuse)")
        if self.computed[-1] >= self.steps:
            raise ValueError(f"step {self.computed[-1]} is beyond the {self.steps} steps")
        return self

    @property
    def skipped(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.steps) if i not in set(self.computed))

    def label(self) -> str:
        return "{" + ",".join(map(str, self.computed)) + f"}} of {self.steps}"

    def write(self, path: Path) -> Path:
        return atomic_write_text(path, self.model_dump_json(indent=2))


def segment_schedule(steps: int, first: int, last: int, stride: int | None = None) -> DPCacheSchedule:
    """Compute every step outside [first, last]; inside it only every ``stride``-th step from ``first``
    (default: none but ``first``)."""
    if not 0 < first <= last < steps:
        raise InputError(f"segment {first}-{last} must lie inside steps 1..{steps - 1}")
    inside = set(range(first, last + 1, stride)) if stride else {first}
    computed = [i for i in range(steps) if i < first or i > last or i in inside]
    return DPCacheSchedule(steps=steps, computed=tuple(computed), source=f"segment:{first}-{last}/{stride or 0}")


def parse_schedule(text: str, steps: int) -> DPCacheSchedule:
    """``--dp-cache``: a file path, ``segment:A-B[/S]``, or a set of computed steps."""
    path = Path(text)
    if path.suffix in (".json", ".yaml", ".yml") or path.is_file():
        return load_schedule(path, steps)
    segment = _SEGMENT.match(text.strip())
    if segment:
        first, last, stride = segment.groups()
        return segment_schedule(steps, int(first), int(last), int(stride) if stride else None)
    cleaned = text.strip().strip("{}").replace(" ", "")
    if not re.fullmatch(r"\d+(,\d+)*", cleaned):
        raise InputError(f"--dp-cache '{text}': give a set like {{0,1,2,6,8,9}}, segment:3-7/2, or a schedule file")
    try:
        return DPCacheSchedule(steps=steps, computed=tuple(sorted({int(i) for i in cleaned.split(",")})), source=text)
    except ValidationError as exc:
        raise InputError(f"--dp-cache '{text}': {exc.errors()[0]['msg']}") from None


def load_schedule(path: Path, steps: int) -> DPCacheSchedule:
    text = read_text_file(path, "DP-Cache schedule", MAX_SCHEDULE_BYTES)  # a FIFO, folder or binary: InputError
    try:
        data = json.loads(text)
        if isinstance(data, dict) and "kind" in data:  # a calibration artifact: the schedule is nested
            data = data.get("schedule")
        schedule = DPCacheSchedule.model_validate(data)
    except RecursionError:
        raise InputError(f"{path}: not a DP-Cache schedule: nested too deeply") from None
    except (ValueError, ValidationError) as exc:  # JSONDecodeError, an integer of over 4300 digits, the schema
        raise InputError(f"{path}: not a DP-Cache schedule: {exc}") from None
    if schedule.steps != steps:
        raise InputError(f"{path}: the schedule is for {schedule.steps} steps, this run has {steps}")
    return schedule
