"""Plug-ins own their facts: a backend, a model family and an energy meter are each added from only the files
ARCHITECTURE.md's "Where to add" names, and each shows up in the CLI's help, its listing, a run and the site."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import import_module, resources
from pathlib import Path

import pytest
import torch

from vlabench.backends import BACKENDS, BackendOptions
from vlabench.errors import InputError
from vlabench.hardware.detection import detect_host
from vlabench.hardware.devices import load_device_profile
from vlabench.models.replicas import replica_class
from vlabench.models.specs import SPEC_CLASSES, families, load_model_spec, model_names
from vlabench.telemetry.energy.select import METER_CLASSES, choose_meter, meter_choices, meters, sensor_names

# The three plug-ins, each in the files "Where to add" names (written to a folder of their own).
BACKEND_FILES = {
    "throwaway_backend/__init__.py": """
        from throwaway_backend.backend import ThrowawayBackend

        __all__ = ["ThrowawayBackend"]
    """,
    "throwaway_backend/backend.py": """
        from vlabench.backends.base import NoOptions
        from vlabench.backends.torch.backend import TorchBackend


        class ThrowawayOptions(NoOptions):
            fuse_expert_kv: bool = False


        class ThrowawayBackend(TorchBackend):
            '''The torch backend under another name and runtime label.'''

            name = "throwaway"
            runtime_library = "throwaway-runtime"
            Options = ThrowawayOptions

            @classmethod
            def from_options(cls, options):
                return cls(cls.own_options(options).fuse_expert_kv)
    """,
}
FAMILY_FILES = {
    "throwaway_family/__init__.py": "",
    "throwaway_family/configuration.py": """
        from typing import Literal

        from vlabench.models.spec_base import PixelRule
        from vlabench.models.specs import FlowVLASpec


        class ThrowawaySpec(FlowVLASpec):
            family: Literal["throwaway-vla"]
            pixels = PixelRule("stretch", "imagenet")
            replica = "throwaway_family.modeling:ThrowawayVLA"
    """,
    "throwaway_family/modeling.py": """
        from vlabench.models.replicas.flow_vla import FlowMatchingVLA


        class ThrowawayVLA(FlowMatchingVLA):
            '''A flow-matching VLA of a family of its own.'''
    """,
}
METER_FILES = {
    "throwaway_meter.py": """
        import time

        from vlabench.telemetry.energy.base import EnergyMeter, EnergyReading


        class ThrowawayMeter(EnergyMeter):
            '''A 5 W sensor.'''

            sensor = "throwaway-sensor"
            method = "throwaway-sensor"
            scope = "package"
            label = "measured"
            sampling_period_s = None

            def start(self):
                self._t0 = time.monotonic()

            def stop(self):
                duration = time.monotonic() - self._t0
                return EnergyReading(joules=5.0 * duration, duration_s=duration, samples=2)

            def close(self):
                pass
    """,
}
# What the registrations do (the line each plug-in adds to its registry), then everything the test looks at.
SCRIPT = """
import json, sys
from pathlib import Path

from vlabench.backends import BACKENDS
from vlabench.models.specs import SPEC_CLASSES
from vlabench.telemetry.energy.select import METER_CLASSES
from throwaway_backend import ThrowawayBackend
from throwaway_family.configuration import ThrowawaySpec
from throwaway_meter import ThrowawayMeter

BACKENDS["throwaway"] = ThrowawayBackend
SPEC_CLASSES.append(ThrowawaySpec)
METER_CLASSES.append(ThrowawayMeter)

from typer.testing import CliRunner

from leaderboard_site.rows import software_stack
from vlabench.cli import app
from vlabench.results.schema import load_result

out = Path(sys.argv[1])
runner = CliRunner()
run = runner.invoke(app, [
    "run", "--model", "throwaway-tiny", "--backend", "throwaway", "--device", "cpu", "--energy-meter",
    "throwaway-sensor", "--energy-window", "1", "--idle-window", "0.1", "--out", str(out / "results"), "--warmup",
    "1", "--min-iterations", "2", "--min-duration", "0", "--threads", "1",
])
results = sorted((out / "results").glob("*.json"))
result = load_result(results[0]) if results else None
print(json.dumps({
    "help": runner.invoke(app, ["run", "--help"]).output + runner.invoke(app, ["models", "--help"]).output,
    "models": runner.invoke(app, ["models", "--json"]).output,
    "run_exit": run.exit_code,
    "run_output": run.output,
    "backend": result.backend if result else None,
    "family": result.model.family if result else None,
    "energy_method": result.energy.method if result and result.energy else None,
    "energy_label": result.energy.label if result and result.energy else None,
    "stack": software_stack(result) if result else None,
}))
"""


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text).lstrip())


@pytest.fixture(scope="module")
def added(tmp_path_factory) -> dict:
    """The three plug-ins written, registered and used in a fresh process (their registries are left untouched in
    this one), with a model of the new family in a profiles folder of its own."""
    root = tmp_path_factory.mktemp("plugins")
    write(root / "code", {**BACKEND_FILES, **FAMILY_FILES, **METER_FILES})
    tiny = resources.files("vlabench.profiles").joinpath("models", "pi0-tiny.yaml").read_text()
    model = tiny.replace("name: pi0-tiny", "name: throwaway-tiny").replace("family: pi0\n", "family: throwaway-vla\n")
    (root / "profiles" / "models").mkdir(parents=True)
    (root / "profiles" / "models" / "throwaway-tiny.yaml").write_text(model)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "code"), os.environ.get("PYTHONPATH", "")]),
        "VLABENCH_PROFILES": str(root / "profiles"),
        "VLABENCH_CACHE": str(root / "cache"),
        "COLUMNS": "400",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_backend_family_and_meter_are_in_the_help(added):
    flags = added["help"]
    assert "onnxruntime, openvino, tensorrt, throwaway; a comma list" in flags  # --backend
    assert "throwaway: compute the expert's prefix" in flags  # --fuse-expert-kv: it fuses like the torch backend
    assert "throwaway-vla." in flags  # `vlabench models --help` names the families
    assert "rapl, throwaway-sensor, estimated or none" in flags  # --energy-meter


def test_a_new_family_is_listed_and_runs_through_a_new_backend_on_a_new_meter(added):
    listed = {row["name"]: row for row in json.loads(added["models"])}
    assert listed["throwaway-tiny"]["family"] == "throwaway-vla"
    assert added["run_exit"] == 0, added["run_output"]
    assert (added["backend"], added["family"]) == ("throwaway", "throwaway-vla")
    assert (added["energy_method"], added["energy_label"]) == ("throwaway-sensor", "measured")


def test_the_site_labels_a_new_backend_with_its_own_runtime(added):
    assert added["stack"] == "throwaway-runtime"


def test_the_registries_are_left_as_they_were():
    assert "throwaway" not in BACKENDS and "throwaway-vla" not in families() and "throwaway-tiny" not in model_names()
    assert "throwaway-sensor" not in sensor_names()


def test_every_registered_plug_in_carries_its_facts():
    for name, backend in BACKENDS.items():
        assert backend.name == name and backend.runtime_library, name
    for spec in SPEC_CLASSES:
        assert spec.pixels.resize in ("pad", "stretch") and spec.pixels.range in ("symmetric", "imagenet"), spec
        module, _, cls = spec.replica.partition(":")
        assert getattr(import_module(module), cls), spec
    for spec in map(load_model_spec, model_names()):
        assert replica_class(spec), spec.name
        if spec.action_loop == "greedy_decode":  # a token-decoding family carries its tokens' rule
            tokens = torch.zeros(1, spec.action.steps + 1, dtype=torch.long)
            shape = (1, spec.action.chunk, spec.action.action_dim)
            assert spec.actions_from_tokens(tokens, spec.action.chunk).shape == shape, spec.name
            assert 0 < spec.first_action_token < spec.llm.vocab, spec.name
    assert len({meter.method for meter in METER_CLASSES}) == len(METER_CLASSES)
    assert set(meter_choices()) == {"auto", "estimated", "none", *meters()}


def test_a_backend_validates_its_own_options():
    with pytest.raises(InputError, match="backend 'openvino': profile_nodes: Input should be a valid boolean"):
        BACKENDS["openvino"].from_options(BackendOptions(profile_nodes="yes"))  # type: ignore[arg-type]
    assert BACKENDS["onnxruntime"].own_options(BackendOptions(ep="cpu", compile_mode="max-autotune")).ep == "cpu"


def test_a_profile_sensor_no_meter_reads_is_noted():
    choice = choose_meter("estimated", load_device_profile("ascend-310p"), detect_host())
    assert "npu-smi: no energy meter reads this sensor" in choice.notes
