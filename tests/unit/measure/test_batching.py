"""The dynamic batcher: batches never exceed the maximum, a batch waits at most the maximum wait after its oldest
request, requests are served oldest first (no robot starves), and failures reach every request they concern."""

from __future__ import annotations

import itertools
import threading
import time
import types

import pytest

import vlabench.measure.serving
from vlabench.measure.batching import BatcherClosed, BatcherFull, DynamicBatcher, serve
from vlabench.measure.serving import (
    Reply,
    RobotsSettings,
    ServedRequest,
    ServingMeasurement,
    drive_robots,
    serve_robots,
)


class FakeClock:
    """A clock the test moves by hand (ns)."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_a_batch_never_exceeds_the_maximum_and_takes_the_oldest_first():
    clock = FakeClock()
    batcher = DynamicBatcher(max_batch=3, max_wait_s=10.0, clock=clock)
    for robot in range(7):
        batcher.submit(robot, f"obs-{robot}")
    sizes, order, numbers = [], [], []
    while batcher.pending():
        batch = batcher.next_batch(timeout_s=1.0, flush_at_ns=0)  # the window's end has passed: no waiting to fill
        sizes.append(len(batch))
        order.extend(request.robot for request in batch)
        numbers.append({request.batch for request in batch})
    assert sizes == [3, 3, 1] and order == list(range(7)) and numbers == [{0}, {1}, {2}]


def test_the_end_of_the_window_is_a_hard_bound_on_the_wait_to_fill_a_batch():
    """A minute's maximum wait never holds a request past the end of the serving window."""
    clock = FakeClock()
    batcher = DynamicBatcher(max_batch=4, max_wait_s=60.0, clock=clock)
    batcher.submit(0, "a")
    taken: list = []
    server = threading.Thread(target=lambda: taken.extend(batcher.next_batch(5.0, flush_at_ns=300_000_000)))
    server.start()
    server.join(0.3)
    assert server.is_alive() and not taken  # before the end: the batch is still forming
    clock.now = 300_000_000
    batcher.submit(1, "b")  # wakes the server, which finds the end reached
    server.join(5.0)
    assert [request.robot for request in taken] == [0, 1]


def test_a_full_queue_refuses_a_request_at_once_instead_of_growing():
    batcher = DynamicBatcher(max_batch=2, max_wait_s=0.0, max_queued=3)
    for robot in range(3):
        batcher.submit(robot, robot)
    with pytest.raises(BatcherFull, match="at most 3"):
        batcher.submit(3, 3)
    batcher.next_batch(timeout_s=1.0)
    batcher.submit(3, 3)  # room again once a batch left the queue


def test_every_batch_served_leaves_a_record_of_when_it_ran_and_what_it_computed():
    clock = FakeClock()
    batcher = DynamicBatcher(max_batch=4, max_wait_s=0.0, clock=clock)
    for robot in range(3):
        batcher.submit(robot, robot)
    clock.now = 1_000

    def infer(payloads):
        clock.now = 5_000
        return payloads, 4

    record = serve(batcher.next_batch(timeout_s=1.0), infer, clock)
    assert (record.number, record.start_ns, record.end_ns, record.size, record.rows) == (0, 1_000, 5_000, 3, 4)
    batcher.submit(9, 9)
    failed = serve(batcher.next_batch(timeout_s=1.0), lambda payloads: 1 / 0, clock)
    assert failed.number == 1 and failed.rows == 0  # the failed batch computed nothing for anyone


def test_a_full_batch_is_served_without_waiting(monkeypatch):
    batcher = DynamicBatcher(max_batch=2, max_wait_s=30.0)
    batcher.submit(0, "a")
    batcher.submit(1, "b")

    def wait(*_args):
        raise AssertionError("a full batch waited for a third request")

    monkeypatch.setattr(batcher._changed, "wait", wait)
    assert [request.robot for request in batcher.next_batch(timeout_s=1.0)] == [0, 1]


def test_a_partial_batch_waits_until_the_oldest_request_has_waited_the_maximum():
    clock = FakeClock()
    batcher = DynamicBatcher(max_batch=4, max_wait_s=0.2, clock=clock)
    batcher.submit(0, "a")
    taken: list = []
    server = threading.Thread(target=lambda: taken.extend(batcher.next_batch(timeout_s=5.0)))
    server.start()
    server.join(0.3)
    assert server.is_alive() and not taken  # the clock has not moved: the batch is still forming
    clock.now = 100_000_000  # 100 ms: a second request joins the forming batch
    batcher.submit(1, "b")
    server.join(0.3)
    assert server.is_alive()
    clock.now = 200_000_000  # the oldest has waited 200 ms: the batch goes, not full
    server.join(5.0)
    assert [request.robot for request in taken] == [0, 1]
    assert all(request.started_ns == 200_000_000 and request.batch_size == 2 for request in taken)


def test_zero_wait_serves_what_is_queued_at_once():
    batcher = DynamicBatcher(max_batch=8, max_wait_s=0.0)
    batcher.submit(0, "a")
    assert len(batcher.next_batch(timeout_s=1.0)) == 1


def test_an_empty_queue_gives_an_empty_batch_after_the_timeout():
    assert DynamicBatcher(max_batch=2, max_wait_s=0.0).next_batch(timeout_s=0.05) == []


def test_an_inference_error_reaches_every_request_of_its_batch_and_the_server_goes_on():
    batcher = DynamicBatcher(max_batch=2, max_wait_s=0.0)
    first = [batcher.submit(robot, robot) for robot in range(2)]

    def broken(payloads):
        raise RuntimeError("out of memory in the batch")

    serve(batcher.next_batch(timeout_s=1.0), broken, time.perf_counter_ns)
    for request in first:
        with pytest.raises(RuntimeError, match="out of memory"):
            request.wait(1.0)
    later = batcher.submit(5, 5)
    serve(batcher.next_batch(timeout_s=1.0), lambda payloads: ([p * 10 for p in payloads], 2), time.perf_counter_ns)
    assert later.wait(1.0) == 50 and later.rows == 2 and later.batch_size == 1


def test_closing_fails_the_queued_requests_and_refuses_new_ones():
    batcher = DynamicBatcher(max_batch=2, max_wait_s=0.0)
    queued = batcher.submit(0, "a")
    batcher.close()
    with pytest.raises(BatcherClosed):
        queued.wait(1.0)
    with pytest.raises(BatcherClosed):
        batcher.submit(1, "b")


@pytest.mark.parametrize("max_batch, max_wait_s", [(0, 0.0), (1, -1.0)])
def test_impossible_settings_are_refused(max_batch, max_wait_s):
    with pytest.raises(ValueError):
        DynamicBatcher(max_batch, max_wait_s)


def test_robots_served_together_each_get_their_own_rows_and_a_fair_share():
    """Six robots, batches of at most 4: every reply is the robot's own (no mix-up in a batch), every robot is
    served about as often as the others, and no batch is larger than allowed."""
    sizes = []

    def infer(payloads):
        sizes.append(len(payloads))
        time.sleep(0.01)
        return [("reply", robot, number) for robot, number in payloads], 4

    replies: dict[int, list] = {}

    def payloads(robot, number):
        replies.setdefault(robot, []).append(number)
        return (robot, number)

    settings = RobotsSettings(robots=6, max_batch=4, max_wait_s=0.005, period_s=0.05, duration_s=1.0)
    measured = serve_robots(infer, payloads, settings)
    assert not measured.failures and max(sizes) <= 4
    counts = [sum(entry.robot == robot for entry in measured.requests) for robot in range(6)]
    assert min(counts) >= 5 and max(counts) - min(counts) <= 2, counts
    assert all(entry.queue_ms >= 0 and entry.latency_ms >= entry.inference_ms for entry in measured.requests)


def test_a_robot_whose_requests_fail_is_reported_not_hung():
    def infer(payloads):
        raise RuntimeError("the backend crashed")

    settings = RobotsSettings(robots=2, max_batch=2, max_wait_s=0.0, period_s=0.05, duration_s=0.5)
    measured = serve_robots(infer, lambda robot, number: robot, settings)
    assert measured.requests == [] and len(measured.failures) == 2
    assert all("RuntimeError: the backend crashed" in failure for failure in measured.failures)


def sleeping_ask(latency_s: float):
    def ask(robot, number):
        time.sleep(latency_s)
        return Reply(queue_ms=0.0, inference_ms=latency_s * 1000, batch_size=1, rows=1)

    return ask


class VirtualTime:
    """The serving loop's clock and sleep, moved only by what the robot threads sleep (their waits and their replies):
    a closed-loop robot's timeline is exact whatever the host's load. The driving thread's own polling sleeps do not
    move it (they yield the CPU for real)."""

    def __init__(self, monkeypatch):
        self.now, self.driver, self.real_sleep = 0, threading.get_ident(), time.sleep
        monkeypatch.setattr(vlabench.measure.serving, "clock", lambda: self.now)
        monkeypatch.setattr(vlabench.measure.serving, "time", types.SimpleNamespace(sleep=self.sleep))

    def sleep(self, seconds: float) -> None:
        if threading.get_ident() == self.driver:
            self.real_sleep(0.001)
        else:
            self.now += round(seconds * 1e9)

    def ask(self, latency_s: float):
        def ask(robot, number):
            self.sleep(latency_s)
            return Reply(queue_ms=0.0, inference_ms=latency_s * 1000, batch_size=1, rows=1)

        return ask


@pytest.fixture
def virtual_time(monkeypatch) -> VirtualTime:
    return VirtualTime(monkeypatch)


def test_async_execution_is_on_time_while_the_next_chunk_comes_within_the_current_one(virtual_time):
    """The robot asks as soon as it starts a chunk; a reply in 20 ms for chunks of 100 ms never leaves it idle."""
    settings = RobotsSettings(robots=1, max_batch=1, max_wait_s=0.0, period_s=0.1, duration_s=0.6, execution="async")
    measured = drive_robots(virtual_time.ask(0.02), settings)
    assert len(measured.requests) == 7 and all(entry.stall_ms == 0 for entry in measured.requests)
    # the second request goes out as the first chunk starts, then one each time a chunk starts: a chunk apart
    sends = [entry.sent_ns for entry in measured.requests[1:]]
    assert all(later - earlier == 100_000_000 for earlier, later in itertools.pairwise(sends))


def test_async_execution_stalls_by_what_a_slow_reply_takes_beyond_the_chunk(virtual_time):
    settings = RobotsSettings(robots=1, max_batch=1, max_wait_s=0.0, period_s=0.05, duration_s=0.8, execution="async")
    measured = drive_robots(virtual_time.ask(0.12), settings)
    later = measured.requests[1:]  # the first chunk has no chunk before it to run out
    assert measured.requests[0].stall_ms == 0 and later
    assert all(entry.stall_ms == pytest.approx(70) for entry in later), [entry.stall_ms for entry in later]


def test_sync_execution_waits_for_every_chunk_and_per_step_only_for_late_ones(virtual_time):
    sync = RobotsSettings(robots=1, max_batch=1, max_wait_s=0.0, period_s=0.05, duration_s=0.5, execution="sync")
    measured = drive_robots(virtual_time.ask(0.02), sync)
    assert measured.requests and all(entry.stall_ms == pytest.approx(entry.latency_ms) for entry in measured.requests)
    step = RobotsSettings(robots=1, max_batch=1, max_wait_s=0.0, period_s=0.05, duration_s=0.5)
    on_time = drive_robots(virtual_time.ask(0.02), step).requests
    assert on_time and all(entry.stall_ms == 0 for entry in on_time)
    late = drive_robots(virtual_time.ask(0.08), step).requests
    assert late and all(entry.stall_ms == pytest.approx(30) for entry in late)


@pytest.mark.parametrize("largest, sizes", [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])])
def test_batches_run_on_power_of_two_buckets_up_to_the_largest(largest, sizes):
    from vlabench.commands.run.serving import bucket_sizes

    assert bucket_sizes(largest) == sizes


def test_padding_is_the_share_of_computed_rows_no_robot_asked_for():
    from vlabench.results.serving import serving_result

    def served(robot, batch_size, rows):
        reply = Reply(queue_ms=1.0, inference_ms=5.0, batch_size=batch_size, rows=rows)
        return ServedRequest(robot, 0, 10_000_000, reply)

    # a batch of three padded to four rows, then one request alone on a one-row graph: 5 rows for 4 requests
    requests = [served(0, 3, 4), served(1, 3, 4), served(2, 3, 4), served(0, 1, 1)]
    settings = RobotsSettings(robots=3, max_batch=4, max_wait_s=0.0, period_s=0.1, duration_s=1.0)
    measured = ServingMeasurement(settings, requests, duration_s=1.0)
    result = serving_result(measured, transport="in-process", actions_per_request=1, batch_sizes=[1, 2, 4])
    assert result.batches == 2 and result.mean_batch == pytest.approx(2.0)
    assert result.padded_share == pytest.approx(1 - 4 / 5) and result.batch_sizes == [1, 2, 4]


def test_open_loop_robots_ask_whether_or_not_they_were_answered_and_shed_what_they_cannot_hold():
    """Poisson arrivals to a server four times too slow: requests overlap, latency counts from when each was due
    (the client's own queueing included), and what a robot cannot hold is shed and counted."""
    settings = RobotsSettings(
        robots=2, max_batch=1, max_wait_s=0.0, period_s=0.02, duration_s=0.6, arrivals="poisson", seed=3
    )
    measured = drive_robots(sleeping_ask(0.08), settings)
    assert measured.shed > 0 and not measured.failures and measured.stopped is None
    entries = sorted(measured.requests, key=lambda entry: entry.sent_ns)
    overlapping = any(later.sent_ns < earlier.received_ns for earlier, later in itertools.pairwise(entries))
    assert overlapping and all(entry.latency_ms >= 80 for entry in entries)


def test_ctrl_c_ends_the_window_and_keeps_what_was_served():
    """Ctrl-C in the middle of a batch is noted, not raised: the batch ends and is kept, then the window closes."""
    import os
    import signal

    calls = []

    def pump(end_ns):
        calls.append(end_ns)
        if len(calls) == 20:
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        return "the batch's record" if len(calls) == 20 else None

    settings = RobotsSettings(robots=2, max_batch=1, max_wait_s=0.0, period_s=0.02, duration_s=30.0)
    measured = drive_robots(sleeping_ask(0.005), settings, pump)
    assert measured.stopped.startswith("interrupted (Ctrl-C) after") and measured.requests
    assert measured.batches == ["the batch's record"] and len(calls) == 20  # the batch Ctrl-C landed in is kept


def test_sigterm_ends_the_window_like_ctrl_c():
    import os
    import signal

    settings = RobotsSettings(robots=1, max_batch=1, max_wait_s=0.0, period_s=0.02, duration_s=30.0)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    measured = drive_robots(sleeping_ask(0.005), settings)
    assert measured.stopped.startswith("interrupted (SIGTERM)") and measured.requests
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handler is back


def test_a_minute_of_max_wait_does_not_stretch_a_short_window():
    """``--max-wait-ms 60000 --serve-duration 0.3``: the batches flush at the end of the window, every robot gets
    its last reply, and the window closes long before a batch's maximum wait (a minute) could pass."""

    def infer(payloads):
        return payloads, len(payloads)

    settings = RobotsSettings(robots=3, max_batch=8, max_wait_s=60.0, period_s=0.05, duration_s=0.3)
    measured = serve_robots(infer, lambda robot, number: robot, settings)
    assert measured.requests and measured.unfinished == 0 and not measured.failures
    assert measured.duration_s < settings.max_wait_s / 2
    assert sum(record.size for record in measured.batches) == len(measured.requests)


def test_the_capacity_search_doubles_then_bisects_and_keeps_the_largest_count_that_passed():
    from vlabench.measure.capacity import search_capacity

    found = search_capacity(lambda robots: (robots <= 5, f"served {robots}"), most=64)
    assert [step.robots for step in found.steps] == [1, 2, 4, 8, 6, 5] and found.capacity == 5
    assert found.at_capacity.served == "served 5"
    everything = search_capacity(lambda robots: (True, robots), most=6)
    assert [step.robots for step in everything.steps] == [1, 2, 4, 6] and everything.capacity == 6
    nothing = search_capacity(lambda robots: (False, robots), most=6)
    assert nothing.capacity == 0 and nothing.at_capacity.robots == 1
    stopped = search_capacity(lambda robots: (True, robots), most=64, stop=lambda served: served == 4)
    assert stopped.stopped and stopped.capacity == 2 and [step.robots for step in stopped.steps] == [1, 2, 4]
