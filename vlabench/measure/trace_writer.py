"""Chrome trace-event JSON (opens in Perfetto and chrome://tracing): phase spans, counters and merged profiler events.

All times are ``time.perf_counter_ns`` values converted to microseconds since the trace origin; events from other
clocks (ONNX Runtime's wall clock, the torch profiler's) are shifted onto it before they are added.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vlabench.atomic import atomic_write_text
from vlabench.telemetry.counters import Series

PHASE_PROCESS = 1
COUNTER_PROCESS = 2
EXTERNAL_PROCESS_BASE = 10


class ChromeTrace:
    def __init__(self, origin_ns: int, title: str) -> None:
        self.origin_ns = origin_ns
        self.events: list[dict[str, Any]] = []
        self.metadata: dict[str, Any] = {"title": title}
        self._process(PHASE_PROCESS, "vlabench phases", 0)
        self._process(COUNTER_PROCESS, "vlabench counters", 1)
        self._threads: dict[tuple[int, str], int] = {}
        self._external = 0

    def us(self, t_ns: int) -> float:
        return (t_ns - self.origin_ns) / 1e3

    def _process(self, pid: int, name: str, order: int) -> None:
        self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        self.events.append(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": order}}
        )

    def thread(self, pid: int, name: str) -> int:
        """The tid of a named track inside ``pid`` (created on first use)."""
        key = (pid, name)
        if key not in self._threads:
            tid = len([k for k in self._threads if k[0] == pid]) + 1
            self._threads[key] = tid
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        return self._threads[key]

    def span(self, name: str, start_ns: int, end_ns: int, track: str, args: dict[str, Any] | None = None) -> None:
        event = {
            "ph": "X",
            "name": name,
            "cat": track,
            "pid": PHASE_PROCESS,
            "tid": self.thread(PHASE_PROCESS, track),
            "ts": self.us(start_ns),
            "dur": (end_ns - start_ns) / 1e3,
        }
        if args:
            event["args"] = args
        self.events.append(event)

    def counters(self, series: Iterable[Series]) -> None:
        """One counter track per series; each value is drawn from the start of the interval it describes."""
        for one in series:
            keyed = [(key, sample) for key, samples in one.samples.items() for sample in samples]
            by_time: dict[int, dict[str, float]] = {}
            for key, sample in keyed:
                by_time.setdefault(sample.start_ns, {})[key] = sample.value
            name = f"{one.name} ({one.unit})"
            for start_ns in sorted(by_time):
                self.events.append(
                    {
                        "ph": "C",
                        "name": name,
                        "pid": COUNTER_PROCESS,
                        "ts": self.us(start_ns),
                        "args": by_time[start_ns],
                    }
                )

    def external(self, events: Iterable[dict[str, Any]], name: str, shift_us: float) -> None:
        """Merge another tool's trace events as their own process(es), shifted by ``shift_us`` onto this clock."""
        pids: dict[Any, int] = {}
        for event in events:
            if "ph" not in event:
                continue
            original = event.get("pid", 0)
            if original not in pids:
                self._external += 1
                pids[original] = EXTERNAL_PROCESS_BASE + self._external
                self._process(pids[original], f"{name} ({original})", 10 + self._external)
            moved = {**event, "pid": pids[original]}
            if "ts" in moved and moved.get("ph") != "M":
                moved["ts"] = float(moved["ts"]) + shift_us
            if moved.get("ph") == "M" and moved.get("name") == "process_name":
                continue
            self.events.append(moved)

    def to_json(self) -> dict[str, Any]:
        return {"traceEvents": self.events, "displayTimeUnit": "ms", "metadata": self.metadata}

    def write(self, path: Path) -> Path:
        atomic_write_text(path, json.dumps(self.to_json()))
        return path
