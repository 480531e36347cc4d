"""The emulated link (``run --remote … --link``): its settings are parsed from presets or key=value pairs with clear
refusals; each direction serializes segments at the link's rate, delays them by the one-way delay within its jitter,
keeps them in order, and delivers a lost segment only after a retransmission timeout; through the proxy a byte
stream arrives whole and in order, each segment due no sooner than the delay allows."""

from __future__ import annotations

import itertools
import random
import socket
import threading

import pytest

from vlabench.errors import InputError
from vlabench.serving.link import MIN_RTO_S, MSS, PRESETS, Direction, EmulatedLink, LinkSettings, parse_link


def test_presets_and_key_value_pairs_are_parsed_and_a_changed_preset_says_so():
    assert parse_link("wifi") == PRESETS["wifi"]
    custom = parse_link("delay=20,jitter=2,rate=50,loss=0.5")
    assert custom == LinkSettings("custom", delay_ms=20, jitter_ms=2, rate_mbps=50, loss=0.005)
    changed = parse_link("ethernet,loss=1")
    assert changed.name == "ethernet (changed)" and changed.loss == 0.01 and changed.rate_mbps == 1000


@pytest.mark.parametrize(
    "text, message",
    [
        ("wify", "unknown link 'wify'; valid: ethernet, wifi, wifi-congested"),
        ("delay=-1", "delay=-1 must be a number 0 ≤ x ≤ 10000"),
        ("rate=nan", "rate=nan must be a number"),
        ("loss=60", "loss=60 must be a percentage 0 ≤ x < 50"),
        ("latency=5", "unknown 'latency'"),
    ],
)
def test_a_bad_link_is_refused_naming_what_is_wrong(text, message):
    with pytest.raises(InputError, match=message):
        parse_link(text)


def test_a_direction_serializes_at_its_rate_delays_within_its_jitter_and_keeps_order():
    rate = Direction(LinkSettings("x", rate_mbps=1.0), random.Random(0))
    arrivals = [rate.arrival(0.0, MSS) for _ in range(5)]
    assert arrivals == pytest.approx([MSS * 8 / 1e6 * (k + 1) for k in range(5)])
    jittery = Direction(LinkSettings("x", delay_ms=10, jitter_ms=8), random.Random(1))
    times = [jittery.arrival(k * 0.001, 100) for k in range(200)]
    assert all(a <= b for a, b in itertools.pairwise(times))  # in order, as TCP delivers a stream
    assert all(t - k * 0.001 >= 0.002 - 1e-12 for k, t in enumerate(times))  # never before delay - jitter
    lossy = Direction(LinkSettings("x", delay_ms=1, loss=0.3), random.Random(2))
    delays = [lossy.arrival(k * 1.0, 100) - k * 1.0 for k in range(50)]  # a second apart: no head-of-line wait
    assert any(d >= MIN_RTO_S for d in delays) and any(d < 0.01 for d in delays)


def test_a_stream_crosses_the_proxy_whole_in_order_every_segment_due_no_sooner_than_the_delay(monkeypatch):
    due: dict[int, list[float]] = {}  # per direction: how long after it was read each segment is due
    arrival = Direction.arrival

    def recorded(direction: Direction, now: float, size: int) -> float:
        when = arrival(direction, now, size)
        due.setdefault(id(direction), []).append(when - now)
        return when

    monkeypatch.setattr(Direction, "arrival", recorded)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def echo() -> None:
        connection, _ = listener.accept()
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    link = EmulatedLink("127.0.0.1", port, LinkSettings("x", delay_ms=50, rate_mbps=100))
    try:
        host, _, proxy_port = link.address.rpartition(":")
        payload = bytes(range(256)) * 1000
        with socket.create_connection((host, int(proxy_port))) as client:
            client.sendall(payload)
            received = b""
            while len(received) < len(payload):
                received += client.recv(65536)
        assert received == payload
        assert len(due) == 2 and all(delay >= 0.05 for delays in due.values() for delay in delays)  # there and back
    finally:
        link.close()
        listener.close()
