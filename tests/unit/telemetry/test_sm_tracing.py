"""SM tracing for ``vlabench profile``: kernel-level SM coverage from a kineto trace, GPM per phase through a stand-in
NVML module, the labelled summary columns, and the Chrome-trace tracks. The inputs in tests/data/sm_tracing are
hand-written from the documented formats (see the README there); the expectations are computed by hand."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from tests.support import paths
from tests.support.paths import LEGACY_PROFILE
from vlabench.analysis.phase_summary import SmTracing, gpm_phases, span_args, summarize_phases
from vlabench.analysis.sm_coverage import Kernel, coverage, gpu_sm, gpu_sm_of_kineto, kernel_report, kernels_of
from vlabench.cli.views.profile import profile_table
from vlabench.measure.trace_writer import ChromeTrace
from vlabench.results.profile_artifact import ProfileResult
from vlabench.telemetry.counters import Series
from vlabench.telemetry.gpm import GPM_METRICS, GpmReader, describe_gpm, run_gpm_pass
from vlabench.vocab import Phase

DATA = paths.DATA / "sm_tracing"
KINETO = json.loads((DATA / "kineto_h100_phases.json").read_text())
GPM = json.loads((DATA / "gpm_h100_sequence.json").read_text())
B = 6021000.0  # the fixture's time base, µs
MS = 1_000_000
SMS, SLOTS = 132, 132 * 64  # H100 SXM: SMs, warp slots


@pytest.fixture(scope="module")
def h100():
    return gpu_sm_of_kineto(KINETO["deviceProperties"][0])


def kernel(name_part: str):
    kernels, _ = kernels_of(KINETO["traceEvents"])
    return next(k for k in kernels if name_part in k.name)


def annotation_windows(events) -> dict[str, list[tuple[float, float]]]:
    """Phase windows from the ``vlabench::<span>`` annotations (the profile uses its own spans, which they enclose)."""
    windows: dict[str, list[tuple[float, float]]] = {}
    for event in events:
        if event.get("cat") == "user_annotation" and event["name"].startswith("vlabench::"):
            phase = Phase.of_span(event["name"].removeprefix("vlabench::"))
            if phase in Phase.SUMMARY:
                windows.setdefault(phase, []).append((event["ts"], event["ts"] + event["dur"]))
    return windows


def test_sm_limits_from_the_kineto_device_properties(h100):
    assert (h100.sm_count, h100.compute_capability, h100.max_warps_per_sm) == (132, "9.0", 64)
    assert (h100.registers_per_sm, h100.shared_memory_per_sm) == (65536, 233472)
    assert (h100.max_blocks_per_sm, h100.reserved_shared_memory_per_block) == (32, 1024)
    assert "reported by the device" in h100.limits_source


def test_a_capability_outside_the_table_takes_the_nearest_lower_ones_limits_and_says_so():
    thor = gpu_sm("NVIDIA Thor", 11, 0, 20, {})
    assert thor.max_threads_per_sm == 2048 and "11.0 is not in the table: 10.0's limits" in thor.limits_source
    orin = gpu_sm("Orin", 8, 7, 16, {"registers_per_sm": None})
    assert (orin.max_threads_per_sm, orin.max_blocks_per_sm, orin.shared_memory_per_sm) == (1536, 16, 164 * 1024)


@pytest.mark.parametrize(
    ("name", "resident", "limited_by", "occupancy", "waves", "sm_share", "warp_share"),
    [
        ("sm90_xmma_gemm", 1, "registers", 12 / 64, 2, 1.0, 264 * 12 / (2 * SLOTS)),
        ("layer_norm", 16, "threads", 1.0, 1, 1.0, 256 * 4 / SLOTS),
        ("GeluCUDAKernelImpl", 8, "threads", 1.0, 1, 0.5, 66 * 8 / SLOTS),
        ("cutlass_80_wmma", 2, "registers", 16 / 64, 2, (1 + 36 / SMS) / 2, 300 * 8 / (2 * SLOTS)),
        ("gemv2T_kernel_val", 8, "registers", 0.5, 1, 12 / SMS, 12 * 4 / SLOTS),
        ("flash_fwd_kernel", 2, "registers", 8 / 64, 1, 30 / SMS, 30 * 4 / SLOTS),
    ],
)
def test_resident_blocks_occupancy_and_sm_share_per_kernel(
    h100, name, resident, limited_by, occupancy, waves, sm_share, warp_share
):
    cover = coverage(kernel(name), h100)
    assert (cover.resident_blocks, cover.limited_by, cover.waves) == (resident, limited_by, waves)
    assert cover.occupancy == pytest.approx(occupancy)
    assert cover.sm_share == pytest.approx(sm_share)
    assert cover.warp_share == pytest.approx(warp_share)


def test_shared_memory_with_the_runtimes_reserved_kilobyte_limits_resident_blocks(h100):
    """Two blocks of 116224 B fit the 233472 B of an SM, but not with the 1 KB the runtime reserves per block."""
    tiled = Kernel("smem-bound", 0.0, 1.0, (264, 1, 1), (128, 1, 1), registers=32, shared_memory=116224)
    cover = coverage(tiled, h100)
    assert (cover.resident_blocks, cover.limited_by, cover.waves) == (1, "shared memory", 2)
    assert cover.occupancy == pytest.approx(4 / 64)


def test_sm_time_per_phase_from_the_kineto_trace(h100):
    status, phases, _ = kernel_report(KINETO["traceEvents"], 0.0, annotation_windows(KINETO["traceEvents"]), h100, int)
    assert status["available"] and status["records"] == 7 and status["without_geometry"] == 0  # no memcpy, no range
    rows = {row.phase: row for row in phases}
    vision = rows["vision"]
    assert (vision.kernels, vision.span_ms) == (3, pytest.approx(0.1))
    assert vision.kernel_ms == pytest.approx(0.086) and vision.busy_ms == pytest.approx(0.086)
    assert vision.sm_ms == pytest.approx((60 * 1 + 20 * 1 + 6 * 0.5) / 1e3)
    assert vision.warp_ms == pytest.approx((60 * 0.1875 + 20 * 1024 / SLOTS + 6 * 0.0625) / 1e3)
    assert vision.sm_activity() == pytest.approx(0.83)
    assert rows["prefill"].sm_activity() == pytest.approx(80 * (1 + 36 / SMS) / 2 / 100)
    step = rows["denoise_step"]
    assert step.kernel_ms == pytest.approx(0.037)  # the add kernel counts for its 5 µs inside the span
    assert step.sm_ms == pytest.approx((20 * 12 + 12 * 30 + 5 * 4) / SMS / 1e3)
    assert step.sm_activity() == pytest.approx(620 / SMS / 50)
    assert step.warp_occupancy() == pytest.approx((20 * 48 + 12 * 120 + 5 * 16) / SLOTS / 50)
    # the paper's picture: a kernel runs 74% of the step, yet the step's launches can hold under 10% of the SMs
    assert step.busy_ms / step.span_ms == pytest.approx(0.74) and step.sm_activity() < 0.1 < 0.8 < vision.sm_activity()
    assert rows["e2e"].sm_activity(wall_ms=0.535) == pytest.approx((83 + 80 * (1 + 36 / SMS) / 2 + 640 / SMS) / 535)


def test_kernel_tracks_for_the_chrome_trace(h100):
    def to_ns(us: float) -> int:
        return round((us - B) * 1e3) + 10**9

    _, _, tracks = kernel_report(KINETO["traceEvents"], 0.0, {}, h100, to_ns)
    trace = ChromeTrace(origin_ns=10**9, title="t")
    trace.counters(tracks)
    share = {
        e["ts"]: e["args"]["kernels"] for e in trace.to_json()["traceEvents"] if e.get("name") == "kernel sm share (%)"
    }
    assert share[5.0] == 100.0 and share[65.0] == 0.0 and share[92.0] == 50.0  # K1, the gap after it, K3
    assert share[1045.0] == pytest.approx(100 * 4 / SMS, abs=1e-3)  # rounded to 3 decimals in the trace
    assert any(e.get("name") == "kernel warp occupancy (%)" for e in trace.to_json()["traceEvents"])


class StandInNvml:
    """The pynvml calls the GPM pass makes: device support, sample buffers, and nvmlGpmMetricsGet answering from a
    recorded sequence, one result per pair of consecutive samples."""

    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10

    class NVMLError(Exception):
        pass

    def __init__(self, results, supported=True, mig=False, fail_at_read=None) -> None:
        self.results, self.supported, self.mig, self.fail_at_read = results, supported, mig, fail_at_read
        self.reads = 0
        self.freed: list = []

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"gpu{index}"

    def nvmlGpmQueryDeviceSupport(self, handle):
        return SimpleNamespace(version=1, isSupportedDevice=int(self.supported))

    def nvmlDeviceGetMigMode(self, handle):
        return (int(self.mig), 0)

    def nvmlGpmSampleAlloc(self):
        return SimpleNamespace(read=None)

    def nvmlGpmSampleFree(self, sample):
        self.freed.append(sample)

    def nvmlGpmSampleGet(self, handle, sample):
        self.reads += 1
        if self.reads == self.fail_at_read:
            raise self.NVMLError("Insufficient Permissions")
        sample.read = self.reads

    def c_nvmlGpmMetricsGet_t(self):
        blank = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None, metrics=blank)

    def nvmlGpmMetricsGet(self, request):
        assert request.version == 1 and request.sample1 is not request.sample2
        assert request.sample2.read == request.sample1.read + 1  # the metrics since the previous sample, no older
        recorded = self.results[request.sample2.read - 2]["values"]
        for metric in request.metrics[: request.numMetrics]:
            value = recorded.get(str(metric.metricId))
            metric.nvmlReturn, metric.value = (3, 0.0) if value is None else (0, value)  # 3: NOT_SUPPORTED
        return request


class StandInClock:
    def __init__(self) -> None:
        self.now = 10**9

    def __call__(self) -> int:
        return self.now

    def workload(self, call_ms: float):
        def run() -> None:
            self.now += round(call_ms * MS)

        return run


def gpm_pass(nvml: StandInNvml):
    clock = StandInClock()
    workloads = {phase: clock.workload(GPM["call_ms"][phase]) for phase in GPM["phases"]}
    return run_gpm_pass(workloads, 0, nvml=nvml, clock=clock)


def test_gpm_pass_averages_each_phase_over_its_own_windows():
    nvml = StandInNvml(GPM["results"])
    measured, reason = gpm_pass(nvml)
    assert reason is None and measured is not None
    assert [phase for phase, _, _ in measured.events] == ["vision"] * 3 + ["prefill"] * 3 + ["denoise_step"] * 3
    assert all(end - start >= 0.25e9 for _, start, end in measured.events)
    assert measured.repetitions == {"vision": 75, "prefill": 39, "denoise_step": 189}  # 25, 13 and 63 per window
    assert len(nvml.freed) == 2
    phases = {p.phase: p.metrics for p in gpm_phases(measured)}
    vision = phases["vision"]["gpm sm activity"]
    assert vision.mean == pytest.approx((92.4 + 95.1 + 88.5) / 3) and vision.peak == 95.1
    assert phases["prefill"]["gpm sm activity"].mean == pytest.approx((97.2 + 96.0 + 95.4) / 3)  # lead-in dropped
    step = phases["denoise_step"]
    assert step["gpm sm occupancy"].mean == pytest.approx((6.2 + 7.0 + 5.5) / 3)
    assert step["gpm tensor activity"].mean == pytest.approx((3.1 + 4.0 + 2.6) / 3)
    assert step["gpm dram bandwidth"].mean == pytest.approx((71.4 + 67.9) / 2)  # the unanswered window left out


def test_gpm_reader_fills_the_installed_pynvml_structures():
    """The field names and ctypes types of the installed nvidia-ml-py, with stand-in calls in place of the driver."""
    pynvml = pytest.importorskip("pynvml")
    answers = {pynvml.NVML_GPM_METRIC_SM_UTIL: 41.5, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 77.25}

    def metrics_get(request):
        for index in range(request.numMetrics):
            metric = request.metrics[index]
            metric.nvmlReturn = 0 if metric.metricId in answers else 3
            metric.value = answers.get(metric.metricId, 0.0)
        return request

    names = {name: getattr(pynvml, name) for name in (*GPM_METRICS.values(), "NVML_GPM_METRICS_GET_VERSION")}
    module = SimpleNamespace(
        **names,
        c_nvmlGpmMetricsGet_t=pynvml.c_nvmlGpmMetricsGet_t,
        nvmlGpmSampleAlloc=pynvml.c_nvmlGpmSample_t,
        nvmlGpmSampleGet=lambda handle, sample: sample,
        nvmlGpmMetricsGet=metrics_get,
    )
    reader = GpmReader(module, object())
    assert reader.sample() is None
    assert reader.sample() == {"gpm sm activity": 41.5, "gpm dram bandwidth": 77.25}


@pytest.mark.parametrize(
    ("nvml", "expected"),
    [
        (StandInNvml([], supported=False), "no GPM support on this GPU"),
        (StandInNvml([], mig=True), "MIG mode is enabled"),
        (StandInNvml(GPM["results"], fail_at_read=3), "GPM sampling failed: Insufficient Permissions"),
        (SimpleNamespace(nvmlDeviceGetHandleByIndex=lambda i: "gpu0", NVMLError=Exception), "lacks the GPM API"),
    ],
)
def test_unsupported_gpm_gives_a_reason_never_an_error(nvml, expected):
    measured, reason = gpm_pass(nvml)
    assert measured is None and expected in reason


def test_gpm_without_an_nvidia_driver_gives_a_reason():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")
    measured, reason = run_gpm_pass({"vision": lambda: None}, 0)
    assert measured is None and reason.startswith("NVML unavailable")


def trace_pass_events() -> list[tuple[str, int, int]]:
    """One inference with the fixture's span durations: vision 100 µs, prefill 100 µs, one 50 µs step."""
    us = 1_000
    return [
        ("vision", 0, 100 * us),
        ("prefill", 100 * us, 200 * us),
        ("denoise_step[0]", 200 * us, 250 * us),
        ("action", 200 * us, 250 * us),
        ("e2e", 0, 250 * us),
    ]


def tracing(h100, with_gpm: bool) -> SmTracing:
    windows = annotation_windows(KINETO["traceEvents"])
    status, phases, _ = kernel_report(KINETO["traceEvents"], 0.0, windows, h100, int)
    result = SmTracing(gpu=h100, kernels=status, kernel_phases=phases)
    if with_gpm:
        measured, reason = gpm_pass(StandInNvml(GPM["results"]))
        result.gpm, result.gpm_phases = describe_gpm(reason), gpm_phases(measured)
    else:
        result.gpm = describe_gpm("NVML reports no GPM support on this GPU (GPM needs Hopper or later)")
    return result


def test_summary_labels_gpm_first_then_the_kernel_derived_fallback(h100):
    nvml_busy = Series("gpu utilization", "%", headline="gpu")
    nvml_busy.add("gpu", 0, 250_000, 100.0)
    with_gpm = {r.phase: r for r in summarize_phases(trace_pass_events(), [nvml_busy], None, tracing(h100, True))}
    vision = with_gpm["vision"]
    assert (vision.sm_activity.source, vision.sm_activity.value) == ("GPM", pytest.approx(0.92))
    assert with_gpm["denoise_step"].dram_utilization.value == pytest.approx((71.4 + 67.9) / 200)
    assert with_gpm["denoise_step"].tensor_activity.source == "GPM"
    assert (vision.gpu_busy.source, vision.gpu_busy.value) == ("NVML", 1.0)  # "a kernel ran": 100% in every phase

    fallback = {r.phase: r for r in summarize_phases(trace_pass_events(), [nvml_busy], None, tracing(h100, False))}
    vision, step = fallback["vision"], fallback["denoise_step"]
    assert (vision.sm_activity.source, vision.sm_activity.value) == ("kernels", pytest.approx(0.83))
    assert step.sm_activity.value == pytest.approx(620 / SMS / 50) and step.sm_occupancy.source == "kernels"
    assert step.tensor_activity is None and step.dram_utilization is None  # only GPM measures those
    assert span_args(vision) == {
        "sm_activity %": 83.0,
        "sm_activity source": "kernels",
        "sm_occupancy %": pytest.approx(14.0, abs=0.05),
        "sm_occupancy source": "kernels",
        "gpu_busy %": 100.0,
        "gpu_busy source": "NVML",
    }


def test_jetson_gr3d_and_emc_fill_the_busy_and_dram_columns():
    gr3d, emc = Series("gpu utilization", "%", headline="gr3d"), Series("gpu memory utilization", "%", headline="emc")
    gr3d.add("gr3d", 0, 100_000, 99.0)
    gr3d.add("gr3d", 100_000, 250_000, 60.0)
    emc.add("emc", 0, 250_000, 45.0)
    rows = {r.phase: r for r in summarize_phases(trace_pass_events(), [gr3d, emc], None, SmTracing())}
    assert (rows["vision"].gpu_busy.source, rows["vision"].gpu_busy.value) == ("GR3D", 0.99)
    assert (rows["prefill"].dram_utilization.source, rows["prefill"].dram_utilization.value) == ("EMC", 0.45)
    assert rows["vision"].sm_activity is None


def test_the_gpm_counter_tracks_reach_the_chrome_trace():
    measured, _ = gpm_pass(StandInNvml(GPM["results"]))
    trace = ChromeTrace(origin_ns=10**9, title="t")
    trace.counters(measured.series)
    tracks = [e for e in trace.to_json()["traceEvents"] if e["ph"] == "C"]
    assert {e["name"] for e in tracks} == {f"{name} (%)" for name in GPM_METRICS}
    first = next(e for e in tracks if e["name"] == "gpm sm activity (%)")
    assert first["args"] == {"gpm": 92.4}


def test_the_profile_table_shows_each_sm_value_with_its_source(h100):
    nvml_busy = Series("gpu utilization", "%", headline="gpu")
    nvml_busy.add("gpu", 0, 250_000, 100.0)
    legacy = ProfileResult.model_validate(json.loads(LEGACY_PROFILE.read_text()))
    for with_gpm, label in ((True, "92% GPM"), (False, "83% kernels")):
        traced = tracing(h100, with_gpm)
        summary = summarize_phases(trace_pass_events(), [nvml_busy], None, traced)
        result = legacy.model_copy(update={"summary": summary, "sm_tracing": traced})
        console = Console(width=200, record=True)
        console.print(profile_table(result))
        text = console.export_text()
        assert label in text and "100% NVML" in text and "Profile: smolvla-tiny" in text
        assert ("GPM not used" in text) != with_gpm and "132 SMs, compute capability 9.0" in text


class StandInPolicy:
    """Phase methods that only advance the stand-in clock (vision 10 ms, prefill 20 ms, a step 4 ms)."""

    def __init__(self, clock: StandInClock) -> None:
        self.clock, self.calls = clock, []

    def _spend(self, name: str, ms: float) -> None:
        self.calls.append(name)
        self.clock.now += round(ms * MS)

    def embed_images(self, obs):
        self._spend("vision", 10)
        return "tokens"

    def prefill(self, obs, tokens):
        assert tokens == "tokens"
        self._spend("prefill", 20)
        return "cache"

    def denoise_step(self, x_t, t, cache):
        assert cache == "cache"
        self._spend("step", 4)
        return torch.zeros_like(x_t)

    def fused_loop(self):
        return None

    def synchronize(self) -> None:
        self.calls.append("sync")


def test_the_profiles_gpm_pass_repeats_each_phase_and_records_the_method(monkeypatch):
    from vlabench.commands import profile as command
    from vlabench.measure.action_loops import EulerLoop

    clock = StandInClock()
    results = [{"between": f"read {i + 1} to {i + 2}", "values": {"2": 10.0 + i}} for i in range(9)]

    def stand_in_pass(workloads, index, window_s, windows):
        return run_gpm_pass(workloads, index, window_s, windows, nvml=StandInNvml(results), clock=clock)

    monkeypatch.setattr(command, "run_gpm_pass", stand_in_pass)
    policy, loop = StandInPolicy(clock), EulerLoop(10, 1, torch.device("cpu"))
    inputs = [("obs", torch.zeros(1, 4, 2))]
    traced = SmTracing()
    record, measured = command._gpm_pass(
        policy, loop, inputs, torch.device("cuda", 0), command.ProfileSettings(gpm_windows=1), traced
    )
    assert record.name == "gpm" and record.instruments == ["nvml gpm"] and len(measured.events) == 5
    assert traced.gpm["available"] and traced.gpm["window_s"] == 0.25 and traced.gpm["windows_per_phase"] == 1
    means = {p.phase: p.metrics["gpm sm activity"].mean for p in traced.gpm_phases}
    assert means == {"vision": 10.0, "prefill": 12.0, "denoise_step": 14.0, "action": 16.0, "e2e": 18.0}
    step_calls = traced.gpm["repetitions"]["denoise_step"]
    assert step_calls == 63 and traced.gpm["repetitions"]["action"] == 7  # 4 ms steps; 40 ms loops, 0.25 s window
    last_e2e = policy.calls[-15:]  # vision, prefill and the ten steps, each phase synchronized
    assert last_e2e == ["vision", "sync", "prefill", "sync", *["step"] * 10, "sync"]

    cpu = SmTracing()
    assert command._gpm_pass(policy, loop, inputs, torch.device("cpu"), command.ProfileSettings(), cpu) is None
    assert cpu.gpm["available"] is False and cpu.gpm["reason"] == "not a CUDA device"
