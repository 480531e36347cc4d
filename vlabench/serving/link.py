"""An emulated network link on loopback (``run --remote … --link wifi``): a small TCP proxy in the robots' path
that delivers the gRPC byte stream as a link would. Each direction is cut into segments (a TCP MSS); a segment waits
for the link to be free at its rate (serialization), then arrives after the one-way delay plus a uniform jitter, in
order (TCP delivers a stream in order, so a late segment holds the ones behind it); a lost segment arrives after a
retransmission timeout instead (max(200 ms, 2 x the round trip), Linux's floor), which is what loss costs a TCP
stream. It needs no privileges, unlike ``tc netem``.

The presets are illustrative assumptions, not measurements of any network: set your own with
``--link delay=MS,jitter=MS,rate=MBIT,loss=PCT`` (a preset's figures can be overridden the same way)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import threading
from dataclasses import dataclass, replace

from vlabench.errors import InputError

MSS = 1448
MIN_RTO_S = 0.2
READ_BYTES = 64 << 10


@dataclass(frozen=True)
class LinkSettings:
    name: str
    delay_ms: float = 0.0  # one way
    jitter_ms: float = 0.0
    rate_mbps: float | None = None
    loss: float = 0.0  # share of segments


PRESETS = {
    "ethernet": LinkSettings("ethernet", delay_ms=0.1, jitter_ms=0.02, rate_mbps=1000.0),
    "wifi": LinkSettings("wifi", delay_ms=2.5, jitter_ms=1.5, rate_mbps=150.0, loss=0.001),
    "wifi-congested": LinkSettings("wifi-congested", delay_ms=10.0, jitter_ms=8.0, rate_mbps=30.0, loss=0.01),
}
KEYS = {"delay": ("delay_ms", 0.0, 10_000.0), "jitter": ("jitter_ms", 0.0, 10_000.0), "rate": ("rate_mbps", 1e-3, 1e5)}


def parse_link(text: str) -> LinkSettings:
    """``wifi``, ``wifi,loss=1`` or ``delay=5,jitter=1,rate=50,loss=0.5`` (ms, ms, Mbit/s, %)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    settings = LinkSettings("custom")
    if items and "=" not in items[0]:
        name = items.pop(0)
        if name not in PRESETS:
            raise InputError(f"--link {text}: unknown link '{name}'; valid: {', '.join(PRESETS)}, or key=value pairs")
        settings = PRESETS[name]
    for item in items:
        key, _, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if key == "loss":
            if not (math.isfinite(number) and 0 <= number < 50):
                raise InputError(f"--link {text}: loss={value} must be a percentage 0 ≤ x < 50")
            settings = replace(settings, loss=number / 100.0)
            continue
        if key not in KEYS:
            raise InputError(f"--link {text}: unknown '{key}'; use delay=MS, jitter=MS, rate=MBIT, loss=PCT")
        field, low, high = KEYS[key]
        if not (math.isfinite(number) and low <= number <= high):
            raise InputError(f"--link {text}: {key}={value} must be a number {low:g} ≤ x ≤ {high:g}")
        settings = replace(settings, **{field: number})
    if settings != PRESETS.get(settings.name) and settings.name != "custom":
        settings = replace(settings, name=f"{settings.name} (changed)")
    return settings


class Direction:
    """One direction of the link: when each segment leaves and arrives."""

    def __init__(self, settings: LinkSettings, rng: random.Random) -> None:
        self.settings, self.rng = settings, rng
        self.free_at = 0.0  # when the link finishes sending what it has
        self.last_arrival = 0.0

    def arrival(self, now: float, size: int) -> float:
        link = self.settings
        sent = now
        if link.rate_mbps:
            self.free_at = max(self.free_at, now) + size * 8 / (link.rate_mbps * 1e6)
            sent = self.free_at
        delay = link.delay_ms / 1000.0 + self.rng.uniform(-link.jitter_ms, link.jitter_ms) / 1000.0
        arrives = sent + max(0.0, delay)
        if link.loss and self.rng.random() < link.loss:
            arrives += max(MIN_RTO_S, 4 * link.delay_ms / 1000.0)
        self.last_arrival = max(self.last_arrival, arrives)
        return self.last_arrival


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: Direction) -> None:
    """Forward one direction, each segment delivered at its arrival time; the writer closes after the last."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

    async def deliver() -> None:
        while (item := await queue.get()) is not None:
            when, segment = item
            await asyncio.sleep(max(0.0, when - loop.time()))
            writer.write(segment)
            await writer.drain()

    sender = asyncio.ensure_future(deliver())
    try:
        while data := await reader.read(READ_BYTES):
            for start in range(0, len(data), MSS):
                segment = data[start : start + MSS]
                queue.put_nowait((direction.arrival(loop.time(), len(segment)), segment))
        queue.put_nowait(None)
        await sender
    except (ConnectionError, OSError):
        pass
    finally:
        sender.cancel()
        writer.close()


def quiet_cancellations(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """Connections cut by ``close`` are no error worth printing; anything else is reported as asyncio would."""
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)


class EmulatedLink:
    """A proxy on 127.0.0.1 (``address``) to ``host:port`` through the link ``settings``; ``close`` stops it."""

    def __init__(self, host: str, port: int, settings: LinkSettings, seed: int = 0) -> None:
        self.target, self.settings, self.rng = (host, port), settings, random.Random(seed)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name="vlabench-link", daemon=True)
        self.thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(quiet_cancellations)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._connect, "127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        started.set()
        self.loop.run_forever()

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            _pipe(reader, upstream_writer, Direction(self.settings, random.Random(self.rng.random()))),
            _pipe(upstream_reader, writer, Direction(self.settings, random.Random(self.rng.random()))),
        )

    def close(self) -> None:
        """Stop accepting, cut every connection, stop the loop."""

        async def shutdown() -> None:
            self.server.close()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(5.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)
        if not self.thread.is_alive():
            self.loop.close()
