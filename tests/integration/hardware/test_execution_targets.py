"""No result can claim a device it did not execute on: routing per engine, refusals before any work, and the
read-back check after preparation, on simulated hosts (a fake `npu-smi` on PATH printing a recorded Atlas 300I
listing, an OpenVINO core listing an Arc GPU and an NPU, NVML naming an H200) through the real detection code."""

from __future__ import annotations

import json
import os
import stat
from typing import ClassVar

import pytest
import torch

import vlabench.hardware.detection as detection
from tests.support import paths
from vlabench.backends import BACKENDS, BackendOptions
from vlabench.commands.run import RunPlan, plan_run, prepare_contender
from vlabench.commands.run.plan import route_backend
from vlabench.commands.run.prepare import seeded_inputs
from vlabench.config import RunConfig
from vlabench.errors import UnavailableError
from vlabench.hardware.devices import all_profiles, load_device_profile
from vlabench.hardware.targets import ENGINE_OF_OPENVINO_DEVICE, ENGINE_OF_TORCH_TYPE, ExecutionTarget, profile_engine
from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.policy import PreparedPolicy
from vlabench.measure.timing import plain_inference

DATA = paths.DATA / "detection"
ARC = "Intel(R) Arc(TM) Pro B60 Graphics"
NPU = "Intel(R) AI Boost"
ORT_ENGINE = {"cpu": "cpu", "cuda": "cuda", "tensorrt": "cuda", "cann": "ascend-npu"}


class FakeOpenVinoCore:
    """``openvino.Core`` of a host with an Arc Pro B60 and an NPU beside the CPU."""

    available_devices: ClassVar[list[str]] = ["CPU", "GPU.0", "NPU"]
    names: ClassVar[dict[str, str]] = {"CPU": "AMD EPYC", "GPU.0": ARC, "GPU": ARC, "NPU": NPU}

    def get_property(self, device: str, name: str):
        if name == "FULL_DEVICE_NAME":
            return self.names[device]
        if name == "OPTIMIZATION_CAPABILITIES":
            return ["FP32", "FP16"]
        return []


class FakeNvml:
    """The pynvml calls detection makes, for a host whose NVML lists one H200."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"


@pytest.fixture
def simulated_host(monkeypatch, tmp_path):
    """Every accelerator vlabench can label, as the host's own tools would report it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npu_smi = bin_dir / "npu-smi"
    npu_smi.write_text(f"#!/bin/sh\ncat '{DATA / 'npu_smi_info_310p3.txt'}'\n")
    npu_smi.chmod(npu_smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    import openvino

    monkeypatch.setattr(openvino, "Core", FakeOpenVinoCore)
    import pynvml

    for name in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName"):
        monkeypatch.setattr(pynvml, name, getattr(FakeNvml(), name))
    detection.detect_host.cache_clear()
    host = detection.detect_host()
    yield host
    detection.detect_host.cache_clear()


def test_the_simulated_host_is_detected_through_the_real_code(simulated_host):
    assert simulated_host.ascend_chips == ("310P3",)
    assert ARC in simulated_host.openvino_devices and NPU in simulated_host.openvino_devices
    assert simulated_host.cuda_devices == ("NVIDIA H200",)


def config(device: str, backend: str, **extra) -> RunConfig:
    return RunConfig(model="smolvla-tiny", device=device, backend=backend, energy_meter="none", **extra)


def routed_engine(options: BackendOptions, backend: str, device: torch.device) -> str:
    """The engine a routed backend will drive, from its own settings (what the runtime will be asked for)."""
    if backend == "openvino":
        return ENGINE_OF_OPENVINO_DEVICE[options.device_target.split(".")[0]]
    if backend == "onnxruntime":
        return ORT_ENGINE[options.ep]
    return ENGINE_OF_TORCH_TYPE[device.type]


ACCELERATOR_PROFILES = [p.name for p in all_profiles() if profile_engine(p) != "cpu"]


@pytest.mark.parametrize("profile", ACCELERATOR_PROFILES)
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_no_accelerator_profile_is_ever_routed_to_the_cpu(profile, backend, monkeypatch):
    """Every (accelerator profile, backend) pair is refused before any work or routed to that accelerator."""
    expected = profile_engine(load_device_profile(profile))
    monkeypatch.setattr("vlabench.commands.run.plan.resolve_target", lambda *_, **__: resolved(profile))
    try:
        _, options, device, engine = route_backend(config(profile, backend))
    except UnavailableError as refusal:
        assert profile in str(refusal) or "cannot" in str(refusal)
        return
    assert engine == expected != "cpu"
    assert routed_engine(options, backend, device.torch_device) == expected


def resolved(profile: str):
    from vlabench.hardware.devices import ResolvedDevice

    return ResolvedDevice(load_device_profile(profile), torch.device("cpu"), profile, "simulated")


def test_arc_through_torch_is_refused_with_what_works(simulated_host):
    with pytest.raises(UnavailableError) as refusal:
        plan_run(config("arc-pro-b60", "torch"))
    assert refusal.value.exit_code == 3
    message = str(refusal.value)
    assert "no usable XPU device" in message
    assert "arc-pro-b60 runs through" in message and "--backend openvino (with device target GPU)" in message


def test_arc_through_openvino_targets_its_gpu(simulated_host):
    plan = plan_run(config("arc-pro-b60", "openvino"))
    assert plan.engine == "intel-gpu" and plan.options.device_target == "GPU"
    assert plan.backend.target == "GPU" and plan.device.profile.name == "arc-pro-b60"


def test_a_contradicting_device_target_is_refused(simulated_host):
    with pytest.raises(UnavailableError, match="--device-target CPU executes on cpu, not on intel-gpu"):
        plan_run(config("arc-pro-b60", "openvino", device_target="CPU"))


def test_ascend_is_refused_through_runtimes_that_cannot_reach_it(simulated_host):
    with pytest.raises(UnavailableError) as through_openvino:
        plan_run(config("ascend-310p", "openvino"))
    assert "--backend torch (on torch_npu's NPU device" in str(through_openvino.value)
    assert "--backend onnxruntime (with --ep cann" in str(through_openvino.value)
    with pytest.raises(UnavailableError, match="torch_npu"):
        plan_run(config("ascend-310p", "torch"))
    with pytest.raises(UnavailableError, match="cann"):
        plan_run(config("ascend-310p", "onnxruntime"))


def test_an_nvidia_gpu_without_a_cuda_torch_is_refused(simulated_host):
    with pytest.raises(UnavailableError, match="cannot use CUDA"):
        plan_run(config("h200", "torch"))


def test_auto_picks_a_profile_the_backend_can_reach_and_labels_it_truly(simulated_host):
    """The Ascend card and the Arc GPU are present, but the torch backend here reaches only the CPU."""
    plan = plan_run(config("auto", "torch"))
    assert plan.engine == "cpu" and profile_engine(plan.device.profile) == "cpu"
    assert plan.device.torch_device.type == "cpu"


class CpuBoundPolicy(PreparedPolicy):
    """A runtime that quietly fell back to the CPU (as ONNX Runtime or OpenVINO AUTO can)."""

    def embed_images(self, obs):
        raise AssertionError("never run")

    def prefill(self, obs, image_tokens):
        raise AssertionError("never run")

    def denoise_step(self, x_t, t, cache):
        raise AssertionError("never run")

    def executed_on(self) -> ExecutionTarget:
        return ExecutionTarget(engine="cpu", device="CPU", source="openvino EXECUTION_DEVICES")

    def synchronize(self) -> None:
        pass


class FallingBackBackend:
    def prepare(self, *args, **kwargs):
        return CpuBoundPolicy()


def test_a_runtime_that_executed_elsewhere_is_refused_after_preparation(simulated_host):
    plan: RunPlan = plan_run(config("arc-pro-b60", "openvino"))
    with pytest.raises(UnavailableError, match=r"executed on the host CPU .*not on an Intel GPU"):
        prepare_contender(plan, backend=FallingBackBackend())


@pytest.mark.parametrize("backend", ["torch", "onnxruntime", "openvino"])
def test_each_runtime_reads_back_where_it_runs(backend):
    plan = plan_run(config("cpu", backend))
    executed = prepare_contender(plan).policy.executed_on()
    assert executed.engine == "cpu"
    assert executed.source in {"torch parameter device", "onnxruntime session providers", "openvino EXECUTION_DEVICES"}
    assert executed.device in {"cpu", "CPUExecutionProvider", "CPU"}


class CountingSession:
    """An ONNX Runtime session that counts the calls that go through host arrays."""

    def __init__(self, session) -> None:
        self.session, self.host_runs = session, 0

    def run(self, *args, **kwargs):
        self.host_runs += 1
        return self.session.run(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.session, name)


def test_io_binding_returns_the_same_actions_as_host_round_trips():
    """The CUDA provider's I/O binding path (bound by pointer, outputs preallocated from the first call's shapes),
    exercised on the CPU provider: same outputs as the host-array path, and no host round trip once bound."""
    plan = plan_run(config("cpu", "onnxruntime"))
    host = prepare_contender(plan).policy
    sessions = {graph: CountingSession(session) for graph, session in host.sessions.items()}
    bound = type(host)(sessions, host.device, host._details, host.graphs, host.cache_type, bind_device=True)
    obs, noise = seeded_inputs(plan, "fp32")[0]
    loop = make_action_loop(plan.spec, plan.workload, plan.device.torch_device)
    expected = plain_inference(host, loop, obs, noise)
    plain_inference(bound, loop, obs, noise)  # learns each graph's output shapes
    learned = {graph: session.host_runs for graph, session in sessions.items()}
    actions = plain_inference(bound, loop, obs, noise)
    assert {graph: session.host_runs for graph, session in sessions.items()} == learned
    torch.testing.assert_close(actions, expected, rtol=0, atol=0)


@pytest.fixture(scope="module")
def cpu_result_json(fast_run) -> dict:
    from vlabench.commands.run import execute

    plan = plan_run(fast_run.config(model="smolvla-tiny", threads=None))
    result = execute(plan)
    assert result.execution.engine == "cpu" and result.device.engine == "cpu" and result.valid
    return json.loads(result.model_dump_json())


def relabelled(data: dict, profile: str, *, engine: bool, execution: bool) -> dict:
    """The CPU run's file claiming ``profile``, as a mislabelling vlabench (or a hand edit) would write it."""
    changed = json.loads(json.dumps(data))
    changed["device"]["profile"] = profile
    if engine:
        changed["device"]["engine"] = profile_engine(load_device_profile(profile))
    else:
        changed["device"].pop("engine")
    if not execution:
        changed.pop("execution")
    return changed


@pytest.mark.parametrize(("engine", "execution"), [(True, True), (False, False)], ids=["current", "before-1.1"])
def test_every_reader_flags_a_result_that_did_not_execute_on_its_profile(cpu_result_json, tmp_path, engine, execution):
    from typer.testing import CliRunner

    from vlabench.cli import app
    from vlabench.leaderboard_site.build import build_site
    from vlabench.results.schema import load_result

    folder = tmp_path / "results"
    folder.mkdir()
    claim = relabelled(cpu_result_json, "ascend-310p", engine=engine, execution=execution)
    (folder / "claim.json").write_text(json.dumps(claim))
    (folder / "true.json").write_text(json.dumps(cpu_result_json))
    loaded = load_result(folder / "claim.json")
    assert loaded.invalid_reason.startswith("mislabelled: executed on the host CPU")
    assert "not on an Ascend NPU" in loaded.invalid_reason
    assert load_result(folder / "true.json").valid
    runner = CliRunner()
    ranked = runner.invoke(app, ["rank", str(folder), "--json"])
    assert ranked.exit_code == 0, ranked.output
    rows = {row["device"]: row for row in json.loads(ranked.stdout)}
    assert "mislabelled" in str(rows["ascend-310p"]) and rows["ascend-310p"].get("rank") in (None, "")
    validated = runner.invoke(
        app, ["validate", str(folder), "--min-iterations", "1", "--min-duration", "0"], env={"COLUMNS": "400"}
    )
    assert validated.exit_code == 6 and "mislabelled: executed on the host CPU" in validated.output
    build_site([folder], tmp_path / "site")
    board = json.loads((tmp_path / "site" / "leaderboard.json").read_text())
    flagged = [row for row in board["rows"] if row.get("device") == "ascend-310p" and row.get("backend") == "torch"]
    assert flagged and all("mislabelled" in str(row.get("invalid_reason")) for row in flagged)
