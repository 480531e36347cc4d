import pytest
import torch

import vlabench.measure.timing
from vlabench.backends import get_backend
from vlabench.measure.action_loops import EulerLoop
from vlabench.measure.stats import summarize
from vlabench.measure.timing import RunnerSettings, SpanRecorder, measure, settling_pause_s
from vlabench.telemetry.energy.estimated import EstimatedMeter
from vlabench.telemetry.energy.select import METER_CLASSES
from vlabench.vocab import Phase


class ConstantVelocity:
    """A policy whose velocity field is constant: Euler integration from t=1 to 0 must land at noise - v."""

    def __init__(self, velocity: float) -> None:
        self.velocity = velocity
        self.times: list[float] = []

    def denoise_step(self, x_t, t, cache):
        self.times.append(float(t[0]))
        return torch.full_like(x_t, self.velocity)


def test_euler_loop_integrates_from_one_to_zero():
    policy = ConstantVelocity(2.0)
    noise = torch.zeros(1, 4, 3)
    actions = EulerLoop(steps=4, batch=1, device=torch.device("cpu")).sample(policy, None, noise)
    assert torch.allclose(actions, torch.full_like(noise, -2.0))
    assert policy.times == pytest.approx([1.0, 0.75, 0.5, 0.25])


def test_the_loop_reports_each_step_to_the_span_callback():
    seen = []
    recorder = SpanRecorder(lambda: None)

    def span(index):
        seen.append(index)
        return recorder.span(Phase.step_span(index))

    EulerLoop(steps=3, batch=1, device=torch.device("cpu")).sample(
        ConstantVelocity(0.0), None, torch.zeros(1, 2, 2), span
    )
    assert seen == [0, 1, 2]
    assert set(recorder.samples_ms) == {"denoise_step[0]", "denoise_step[1]", "denoise_step[2]"}


def test_span_recorder_synchronizes_at_both_edges_and_times_between_them(monkeypatch):
    calls = []
    ticks = iter([1_000_000, 21_000_000])
    monkeypatch.setattr(vlabench.measure.timing, "perf_counter_ns", lambda: calls.append("clock") or next(ticks))
    recorder = SpanRecorder(lambda: calls.append("sync"))
    with recorder.span("work"):
        calls.append("work")
    assert calls == ["sync", "clock", "work", "sync", "clock"]  # each edge read after the target has finished
    assert recorder.samples_ms["work"] == [20.0] and recorder.events == [("work", 1_000_000, 21_000_000)]


def test_summarize_statistics():
    stats = summarize([float(v) for v in range(1, 101)])
    assert stats.count == 100
    assert stats.p50 == pytest.approx(50.5)
    assert stats.p99 == pytest.approx(99.01)
    assert stats.min == 1 and stats.max == 100
    assert stats.cov == pytest.approx(stats.stdev / stats.mean)
    assert summarize([5.0]).stdev == 0.0
    with pytest.raises(ValueError):
        summarize([])


@pytest.fixture
def prepared_tiny(tiny_inputs):
    spec, workload, obs, noise = tiny_inputs("smolvla-tiny")
    policy = get_backend("torch").prepare(spec, workload, torch.device("cpu"), "fp32", seed=0)
    return policy, EulerLoop(workload.steps, 1, torch.device("cpu")), [(obs, noise)]


def test_measure_honours_minimum_iterations(prepared_tiny):
    policy, loop, inputs = prepared_tiny
    result = measure(
        policy, loop, inputs, RunnerSettings(warmup=1, min_iterations=3, min_duration_s=0, max_iterations=50)
    )
    assert result.iterations == 3
    for phase in ("vision", "prefill", "prefix", "action", "e2e", "e2e_unsynced"):
        assert len(result.samples_ms[phase]) == 3
    assert len(result.samples_ms[Phase.step_span(9)]) == 3
    assert Phase.step_span(10) not in result.samples_ms


def test_measure_honours_minimum_duration_and_the_cap(prepared_tiny):
    policy, loop, inputs = prepared_tiny
    timed = measure(
        policy, loop, inputs, RunnerSettings(warmup=0, min_iterations=1, min_duration_s=0.3, max_iterations=10_000)
    )
    assert timed.timed_duration_s >= 0.3
    assert timed.iterations > 1
    capped = measure(
        policy, loop, inputs, RunnerSettings(warmup=0, min_iterations=1, min_duration_s=60, max_iterations=2)
    )
    assert capped.iterations == 2


def test_phase_spans_nest_inside_end_to_end(prepared_tiny):
    policy, loop, inputs = prepared_tiny
    result = measure(
        policy, loop, inputs, RunnerSettings(warmup=1, min_iterations=3, min_duration_s=0, max_iterations=3)
    )
    samples = result.samples_ms
    for i in range(3):
        assert samples["vision"][i] + samples["prefill"][i] <= samples["prefix"][i] + 1e-6
        steps = sum(samples[Phase.step_span(s)][i] for s in range(10))
        assert steps <= samples["action"][i] + 1e-6
        assert samples["prefix"][i] + samples["action"][i] <= samples["e2e"][i] + 1e-6


def test_phased_and_plain_inference_compute_the_same_actions(prepared_tiny):
    from vlabench.measure.timing import SpanRecorder, phased_inference, plain_inference

    policy, loop, inputs = prepared_tiny
    obs, noise = inputs[0]
    phased = phased_inference(policy, loop, obs, noise, SpanRecorder(policy.synchronize))
    plain = plain_inference(policy, loop, obs, noise)
    assert torch.equal(phased, plain)
    assert not torch.equal(plain, noise)


def test_a_fused_loop_replaces_the_action_loop_and_its_step_spans(prepared_tiny):
    policy, loop, inputs = prepared_tiny
    calls = []

    def whole_loop(cache, noise):
        calls.append(1)
        return loop.sample(policy, cache, noise)

    policy.fused_loop = lambda: whole_loop
    result = measure(
        policy, loop, inputs, RunnerSettings(warmup=1, min_iterations=2, min_duration_s=0, max_iterations=2)
    )
    assert len(calls) == 1 + 2 * 2  # warm-up, then a phased and a plain inference per iteration
    assert not any(name.startswith("denoise_step[") for name in result.samples_ms)
    assert len(result.samples_ms["action"]) == 2


@pytest.mark.parametrize("meter_class", METER_CLASSES, ids=lambda cls: cls.__name__)
def test_only_a_sensor_waits_for_the_timing_pass_to_settle_before_its_energy_windows(meter_class):
    meter = object.__new__(meter_class)  # the label is the class's; no sensor is opened
    expected = vlabench.measure.timing.SETTLE_S if meter_class.label == "measured" else 0.0
    assert settling_pause_s(meter) == expected
    assert (expected > 0) == (meter_class is not EstimatedMeter)  # the estimate is the one meter with no sensor
