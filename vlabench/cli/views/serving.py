"""The serving block of a run (``--robots``, ``--remote``): where each robot's time went, and per robot."""

from __future__ import annotations

from rich.text import Text

from vlabench.results.schema import RunResult
from vlabench.results.serving import ServingResult

SPLIT_LABELS = {
    "encode": "robot's encoding",
    "network": "network",
    "server_decode": "server's decoding",
    "decode": "robot's decoding",
}


def latency_parts(served: ServingResult) -> list[tuple[str, float]]:
    """The p50 of each part of a robot's latency, in the order a request goes through them."""
    split = {name: stats.p50 for name, stats in served.split_ms.items()}
    order = [
        ("encode", split.get("encode")),
        ("network", split.get("network")),
        ("server_decode", split.get("server_decode")),
        ("queue", served.queue.p50),
        ("inference", served.inference.p50),
        ("decode", split.get("decode")),
    ]
    return [(SPLIT_LABELS.get(name, name), value) for name, value in order if value is not None]


def serving_lines(result: RunResult) -> list[Text]:
    served = result.serving
    if served is None:
        return []
    where = f"over gRPC from {served.server}" if served.transport == "grpc" else "in this process"
    lines = [
        Text(
            f"serving    {served.robots} robot(s) {where}, batches of at most {served.max_batch} within "
            f"{served.max_wait_ms:g} ms; {served.requests} requests in {served.duration_s:.1f} s, mean batch "
            f"{served.mean_batch:.2f} ({served.padded_share:.0%} padding), {served.actions_per_s:.3g} actions/s"
        ),
        Text(
            f"           latency p50 {served.latency.p50:.1f} ms, p99 {served.latency.p99:.1f} ms; p50s: "
            + " + ".join(f"{label} {value:.1f} ms" for label, value in latency_parts(served))
        ),
    ]
    late = Text(
        f"           {served.late_share:.0%} of chunks arrived after the robot's previous one ran out "
        f"(period {served.request_period_ms:g} ms)",
        style="yellow" if served.late_share > 0 else "",
    )
    lines.append(late)
    robots = ", ".join(
        f"#{robot.robot} p50 {robot.latency_p50_ms:.1f}/p99 {robot.latency_p99_ms:.1f} ms"
        for robot in served.per_robot[:8]
    )
    more = f" (+{len(served.per_robot) - 8} more)" if len(served.per_robot) > 8 else ""
    lines.append(Text(f"           per robot: {robots}{more}", style="dim"))
    if served.joules_per_action is not None:
        lines.append(Text(f"           {served.joules_per_action:.3g} J per action per robot"))
    lines += [Text(f"           failed: {failure}", style="red") for failure in served.failures]
    return lines
