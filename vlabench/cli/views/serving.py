"""The serving block of a run (``--robots``, ``--remote``): where each robot's time went (means, which add up),
the device's busy share, energy per action, the link, per robot, and the capacity search."""

from __future__ import annotations

from rich.text import Text

from vlabench.results.schema import RunResult
from vlabench.results.serving import ServingResult

SPLIT_LABELS = {
    "encode": "robot's encoding",
    "uplink": "uplink",
    "server_decode": "server's decoding",
    "queue": "queue",
    "inference": "inference",
    "server_reply": "server's reply",
    "downlink": "downlink",
    "decode": "robot's decoding",
}
ARRIVALS = {"closed": "closed-loop", "poisson": "open-loop Poisson"}


def latency_parts(served: ServingResult) -> list[tuple[str, float]]:
    """The mean of each part of a robot's latency, in the order a request goes through them (means add up; p50s
    do not)."""
    means = {name: stats.mean for name, stats in served.split_ms.items()}
    means |= {"queue": served.queue.mean, "inference": served.inference.mean}
    return [(label, means[name]) for name, label in SPLIT_LABELS.items() if name in means]


def link_line(served: ServingResult) -> Text | None:
    if served.transport != "grpc":
        return None
    parts = []
    link = served.link
    if link is not None:
        rate = f", {link.rate_mbps:g} Mbit/s" if link.rate_mbps else ""
        parts.append(
            f"emulated {link.name} link ({link.delay_ms:g} ± {link.jitter_ms:g} ms one way{rate}, {link.loss:.1%} loss)"
        )
    sizes = served.payload_bytes
    if sizes:
        parts.append(", ".join(f"{size.mean / 1000:,.1f} kB per {name}" for name, size in sizes.items()))
    if served.encoding is not None:
        quality = f" q{served.encoding.quality}" if served.encoding.quality else ""
        parts.append(f"frames {served.encoding.format}{quality}")
    wire = served.wire
    if wire is not None:
        ping = f"empty call {wire.ping_ms.p50:.2f} ms; " if wire.ping_ms else ""
        parts.append(f"{ping}clocks {wire.clock_offset_ms:+.2f} ± {wire.offset_uncertainty_ms:.2f} ms apart")
    return Text("           " + "; ".join(parts)) if parts else None


def capacity_lines(served: ServingResult) -> list[Text]:
    search = served.capacity
    if search is None:
        return []
    steps = " ".join(f"{step.robots}{'✓' if step.passed else '✗'}" for step in search.steps)
    lines = [
        Text(
            f"capacity   {search.capacity_robots} robot(s) pass the per-robot p99 gate at {search.control_hz:g} Hz "
            f"({ARRIVALS[search.arrivals]} arrivals, at most {search.most} tried): {steps}",
            style="bold",
        )
    ]
    at = next((step for step in search.steps if step.robots == search.capacity_robots), None)
    if at is not None:
        joules = f", {at.joules_per_action:.3g} J per action" if at.joules_per_action is not None else ""
        dollars = f", ${at.usd_per_robot_hour:.4g} per robot-hour" if at.usd_per_robot_hour is not None else ""
        busy = f", device busy {at.busy_fraction:.0%}" if at.busy_fraction is not None else ""
        lines.append(Text(f"           at capacity: mean batch {at.mean_batch:.2f}{busy}{joules}{dollars}"))
    failed = next((step for step in search.steps if not step.passed and step.reason), None)
    if failed is not None:
        lines.append(Text(f"           {failed.robots} robot(s) fail: {failed.reason}", style="dim"))
    return lines


def serving_lines(result: RunResult) -> list[Text]:
    served = result.serving
    if served is None:
        return [Text(f"serving    PARTIAL: {result.partial_reason}", style="bold red")] if result.partial_reason else []
    where = f"over gRPC from {served.server}" if served.transport == "grpc" else "in this process"
    lines = []
    if served.status == "partial":
        lines.append(Text(f"serving    PARTIAL: {served.stopped}; what was served is kept", style="bold red"))
    lines.append(
        Text(
            f"serving    {served.robots} robot(s) {where}, {ARRIVALS[served.arrivals]} arrivals, batches of at most "
            f"{served.max_batch} within {served.max_wait_ms:g} ms; {served.requests} requests in "
            f"{served.duration_s:.1f} s, mean batch {served.mean_batch:.2f} ({served.padded_share:.0%} padding), "
            f"{served.actions_per_s:.3g} actions/s"
        )
    )
    if served.busy_fraction is not None:
        energy = served.energy
        joules = (
            f"; {served.joules_per_action:.3g} J per action per robot ({energy.label}: the window's energy, its "
            "batches and idle time, over the actions delivered)"
            if served.joules_per_action is not None and energy is not None
            else ""
        )
        lines.append(Text(f"           device busy {served.busy_fraction:.0%} of the window{joules}"))
    parts = latency_parts(served)
    lines.append(
        Text(
            f"           latency p50 {served.latency.p50:.1f} ms, p99 {served.latency.p99:.1f} ms; mean "
            f"{served.latency.mean:.1f} ms = "
            + " + ".join(f"{label} {value:.1f}" for label, value in parts)
            + f" (the parts' means add to {sum(value for _, value in parts):.1f} ms)"
        )
    )
    link = link_line(served)
    if link is not None:
        lines.append(link)
    lines.append(
        Text(
            f"           {served.late_share:.0%} of chunks arrived after the robot's previous one ran out "
            f"(period {served.request_period_ms:g} ms)",
            style="yellow" if served.late_share > 0 else "",
        )
    )
    robots = ", ".join(
        f"#{robot.robot} p50 {robot.latency_p50_ms:.1f}/p99 {robot.latency_p99_ms:.1f} ms"
        for robot in served.per_robot[:8]
    )
    more = f" (+{len(served.per_robot) - 8} more)" if len(served.per_robot) > 8 else ""
    lines.append(Text(f"           per robot: {robots}{more}", style="dim"))
    lines += capacity_lines(served)
    lines += [Text(f"           failed: {failure}", style="red") for failure in served.failures[:5]]
    return lines
