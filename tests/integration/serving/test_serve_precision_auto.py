"""``vlabench serve --precision auto`` probes like ``run --precision auto`` (the same launcher), says what it chose,
and serves the chosen precision: its baseline, its description and the policies behind its batcher."""

from __future__ import annotations

import json

import vlabench.commands.run.precision_auto as precision_auto
from vlabench.config import RunConfig
from vlabench.serving.security import server_security
from vlabench.serving.server import start_server
from vlabench.vocab import Precision

QUICK = {"warmup": 1, "min_iterations": 2, "min_duration_s": 0.0, "threads": 1, "energy_meter": "none"}


def test_serve_precision_auto_probes_says_what_it_chose_and_serves_it(monkeypatch):
    monkeypatch.setattr(precision_auto, "read_cpu_flags", lambda: {"amx_bf16"})  # bf16 is a candidate on any CPU
    monkeypatch.setattr(precision_auto, "pick", lambda probed: ("bf16", "picked for the test"))
    config = RunConfig(model="smolvla-tiny", precision="auto", **QUICK)
    said: list[str] = []
    server = start_server(config, "127.0.0.1", 0, server_security(None, None, None, None), inform=said.append)
    try:
        assert any("precision auto → bf16 (picked for the test)" in line for line in said), said
        baseline = server.baseline
        assert baseline.precision == "bf16"
        assert baseline.backend_details["precision_choice"]["chosen"] == "bf16"
        described = json.loads(server.description)["baseline"]
        assert described["precision"] == "bf16"
        for _contender, _pipeline, noise in server.infer.buckets.values():  # the served policies' inputs
            assert noise.dtype == Precision.dtype("bf16")
    finally:
        server.shutdown()
