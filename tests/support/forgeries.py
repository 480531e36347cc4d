"""Impossible results forged from real ones, each breaking one relation of ``results.relations`` and keeping the
others: the figures that follow from the forged one (statistics of changed samples, the control verdict, the cost)
are computed again, so that a reader has to catch the broken rule itself.

The real results are three runs on this repository's CPU (``tests/data/results/README.md``): a plain run, robots
served in process, and robots served over gRPC by a ``vlabench serve`` process (``run --remote``). Each ``Forgery``
names its base, the rule a reader must name, the field, and the range of magnitudes over which it is impossible
(``test_forged_results.py`` draws from it with hypothesis; the fixed corpus uses ``default``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.paths import DATA
from vlabench.measure.stats import summarize
from vlabench.results.assemble import control_verdict
from vlabench.results.cost_relations import model_cost
from vlabench.results.schema import RunResult
from vlabench.results.timing_relations import step_spans

RESULTS = DATA / "results"
LATENCY_FIELDS = ("mean", "p50", "p90", "p99", "min", "max", "stdev")
"""The figures of a phase's statistics that scale with time (the count and CoV do not)."""


@functools.cache
def _base(kind: str) -> dict:
    [path] = sorted((RESULTS / kind).glob("*.json"))
    return json.loads(path.read_text())


def base_document(kind: str) -> dict:
    """A fresh copy of the real result ``kind`` (plain, served, offload)."""
    return copy.deepcopy(_base(kind))


def result_of(document: dict) -> RunResult:
    return RunResult.model_validate(document)


def restat(document: dict, phase: str) -> None:
    """A phase's statistics from its (changed) samples."""
    samples = document["timing"]["samples_ms"][phase]
    document["timing"]["phases"][phase] = summarize(samples).model_dump(mode="json")


def regate(document: dict) -> None:
    """The control verdict of the (changed) latency the robots saw."""
    result = result_of(document)
    control = result.control
    verdict = control_verdict(result.robot_latency, control.control_hz, control.execution_model())
    document["control"] = verdict.model_dump(mode="json")


def recost(document: dict) -> None:
    """The cost of the (changed) inputs, as the cost model computes it."""
    document["cost"] = model_cost(result_of(document)).model_dump(mode="json")


def scaled_stats(stats: dict, factor: float) -> dict:
    """Statistics of samples all ``factor`` times longer: every latency, and each interval's ends."""
    scaled = {**stats, **{key: stats[key] * factor for key in LATENCY_FIELDS}}
    scaled["intervals"] = {
        name: [None if end is None else end * factor for end in ends] for name, ends in stats["intervals"].items()
    }
    return scaled


def scale_samples(document: dict, phase: str, factor: float) -> None:
    document["timing"]["samples_ms"][phase] = [v * factor for v in document["timing"]["samples_ms"][phase]]
    restat(document, phase)


def rederive_rates(document: dict) -> None:
    """A serving block's actions/s and inferences/s from its requests, mean batch and (changed) duration."""
    served = document["serving"]
    per_reply = result_of(document).control.execution_model().actions_per_inference
    served["actions_per_s"] = served["requests"] * per_reply / served["duration_s"]
    served["inferences_per_s"] = served["requests"] / served["mean_batch"] / served["duration_s"]


def set_energy_window(document: dict, watts: float, window_s: float, inferences: int) -> None:
    """An energy block of ``watts`` over ``window_s`` for ``inferences``, every figure following (and the cost)."""
    energy = document["energy"]
    per_inference = watts * window_s / inferences
    actions = energy["joules_per_inference"] / energy["joules_per_action"]
    energy.update(
        average_w=watts,
        window_s=window_s,
        window_inferences=inferences,
        joules_per_inference=per_inference,
        joules_per_action=per_inference / actions,
        dynamic_joules_per_inference=(watts - energy["idle_w"]) * window_s / inferences,
    )
    if document.get("serving"):
        served = document["serving"]
        per_reply = result_of(document).control.execution_model().actions_per_inference
        served["joules_per_action"] = per_inference / (served["mean_batch"] * per_reply)
    recost(document)


@dataclass(frozen=True)
class Forgery:
    name: str
    base: str
    rule: str
    field: str
    forge: Callable[[dict, float], None]
    low: float
    high: float
    default: float

    def document(self, magnitude: float | None = None) -> dict:
        """The base result with this forgery at ``magnitude`` (its default when None), under a run id of its own."""
        document = base_document(self.base)
        self.forge(document, self.default if magnitude is None else magnitude)
        document["run_id"] = self.run_id
        return document

    @property
    def run_id(self) -> str:
        return hashlib.sha256(self.name.encode()).hexdigest()[:32]


def _set(path: str, how: Callable[[object, float], object]) -> Callable[[dict, float], None]:
    """A forgery that replaces one figure (dotted path) by ``how(figure, magnitude)``."""

    def forge(document: dict, k: float) -> None:
        *parents, last = path.split(".")
        block = document
        for key in parents:
            block = block[int(key)] if isinstance(block, list) else block[key]
        block[last] = how(block[last], k)

    return forge


def times(path: str) -> Callable[[dict, float], None]:
    return _set(path, lambda value, k: value * k)


# plain: timing ---------------------------------------------------------------------------------------------------


def short_fast_e2e(document: dict, k: float) -> None:
    """The issue's e2e: one sample fewer than every other phase, and k ms fast (it would rank first)."""
    samples = document["timing"]["samples_ms"]["e2e"][:-1]
    document["timing"]["samples_ms"]["e2e"] = [k * v / min(samples) for v in samples]
    restat(document, "e2e")
    regate(document)
    recost(document)


def statistic_between(stat: str, low: str) -> Callable[[dict, float], None]:
    """The e2e ``stat`` moved toward ``low`` (a fraction k of the way back): still in order, not the samples'."""

    def forge(document: dict, k: float) -> None:
        e2e = document["timing"]["phases"]["e2e"]
        e2e[stat] = e2e[low] + (e2e[stat] - e2e[low]) * k

    return forge


def narrower_stdev(document: dict, k: float) -> None:
    e2e = document["timing"]["phases"]["e2e"]
    e2e["stdev"] *= k
    e2e["cov"] = e2e["stdev"] / e2e["mean"]


def interval_below_every_sample(phase: str) -> Callable[[dict, float], None]:
    """p99's interval [0.8 k, k] × the fastest sample: a judged p99 faster than every sample."""

    def forge(document: dict, k: float) -> None:
        stats = document["serving"][phase] if phase == "latency" else document["timing"]["phases"][phase]
        stats["intervals"]["p99"] = [0.8 * k * stats["min"], k * stats["min"]]

    return forge


def upper_end_below_p50(document: dict, k: float) -> None:
    """The robots' p50 interval within their fastest and slowest reply, its upper end below their p50."""
    latency = document["serving"]["latency"]
    upper = latency["min"] + (latency["p50"] - latency["min"]) * k
    latency["intervals"]["p50"] = [latency["min"] + (upper - latency["min"]) / 2, upper]


def action_beyond_e2e(document: dict, k: float) -> None:
    """The action phase k ms longer than the longest end-to-end inference that contains it."""
    timing = document["timing"]
    gap = timing["phases"]["e2e"]["max"] + k - timing["phases"]["action"]["min"]
    timing["samples_ms"]["action"] = [v + gap for v in timing["samples_ms"]["action"]]
    restat(document, "action")


def steps_times(document: dict, k: float) -> None:
    timing = document["timing"]
    for key in [key for key in timing["samples_ms"] if key.startswith("denoise_step")]:
        timing["samples_ms"][key] = [v * k for v in timing["samples_ms"][key]]
    spans = step_spans(timing["samples_ms"])
    timing["denoise_steps"] = [summarize(timing["samples_ms"][key]).model_dump(mode="json") for key in spans]
    restat(document, "denoise_step")


def in_the_future(document: dict, years: float) -> None:
    for key in ("started_utc", "finished_utc"):
        stamp = document[key]
        document[key] = f"{int(stamp[:4]) + round(years):04d}{stamp[4:]}"


def stretched_window(document: dict, joules: float) -> None:
    """``joules`` per inference at the recorded power, the window stretched to make energy = power × time hold."""
    energy = document["energy"]
    set_energy_window(
        document,
        energy["average_w"],
        joules * energy["window_inferences"] / energy["average_w"],
        energy["window_inferences"],
    )


def per_inference_joules(document: dict, joules: float) -> None:
    energy = document["energy"]
    actions = energy["joules_per_inference"] / energy["joules_per_action"]
    energy.update(joules_per_inference=joules, joules_per_action=joules / actions)
    recost(document)


def average_watts(document: dict, watts: float) -> None:
    energy = document["energy"]
    set_energy_window(document, watts, energy["window_s"], energy["window_inferences"])


def measured_label(document: dict, _: float) -> None:
    document["energy"]["label"] = document["energy"]["meter"]["label"] = document["cost"]["energy_label"] = "measured"


def fraction_of_weights(document: dict, k: float) -> None:
    memory = document["memory"]
    memory["peak_rss_bytes"] = int(memory["weights_bytes"] * k)


def weights_below_precision(document: dict, k: float) -> None:
    memory = document["memory"]
    memory["weights_bytes"] = int(document["model"]["params"] * 4 * k)


def cost_figure(field: str) -> Callable[[dict, float], None]:
    """One cost figure times k, with the figures that sum or divide it following (so one identity breaks)."""

    def forge(document: dict, k: float) -> None:
        cost = document["cost"]
        cost[field] *= k
        if field in ("hardware_usd_per_robot_hour", "electricity_usd_per_robot_hour"):
            cost["usd_per_robot_hour"] = cost["hardware_usd_per_robot_hour"] + cost["electricity_usd_per_robot_hour"]
        cost["usd_per_million_actions"] = cost["usd_per_robot_hour"] / cost["actions_per_robot_hour"] * 1e6

    return forge


def stages_beyond_preparation(document: dict, k: float) -> None:
    document["cold_start"]["stages"]["load"] = {"seconds": document["cold_start"]["prepare_s"] * k, "cached": False}


def window_beyond_pass(document: dict, k: float) -> None:
    document["sustained"]["windows"][0]["max"] = document["timing"]["phases"]["e2e"]["max"] * k


def windows_backwards(document: dict, _: float) -> None:
    windows = document["sustained"]["windows"]
    starts = [window["start_s"] for window in windows]
    for window, start in zip(windows, reversed(starts), strict=True):
        window["start_s"] = start


def idle_probe_half(document: dict, _: float) -> None:
    document["cold_start"]["idle_s"] = None


# served and offload: the serving block --------------------------------------------------------------------------


def robots_faster_than_the_server(document: dict, k: float) -> None:
    """The robots' latency 1/k of what they saw: shorter than the server's own inference inside it."""
    served = document["serving"]
    served["latency"] = scaled_stats(served["latency"], 1 / k)
    for row in served["per_robot"]:
        row.update(latency_p50_ms=row["latency_p50_ms"] / k, latency_p99_ms=row["latency_p99_ms"] / k)
    regate(document)
    recost(document)


def mean_batch_times(document: dict, k: float) -> None:
    served = document["serving"]
    served["mean_batch"] *= k
    recost_sharing(document)


def recost_sharing(document: dict) -> None:
    served, cost = document["serving"], document["cost"]
    cost.update(robots_per_device=served["robots"], rows_per_inference=served["mean_batch"])
    recost(document)


def robots_without_rows(document: dict, robots: float) -> None:
    """``robots`` robots and no failure, but the per-robot rows of the real run's robots only."""
    served = document["serving"]
    served["robots"] = document["config"]["robots"] = int(robots)
    recost_sharing(document)


def duplicate_robot(document: dict, _: float) -> None:
    rows = document["serving"]["per_robot"]
    rows[1]["robot"] = rows[0]["robot"]


def more_entries(document: dict, k: float) -> None:
    document["serving"]["queue"]["count"] += int(k)


def duration_over(document: dict, k: float) -> None:
    document["serving"]["duration_s"] /= k
    rederive_rates(document)


def batches_too_fast(document: dict, t: float) -> None:
    """A duration between what the robots' waits need and what the server's batches need (t of the way)."""
    served = document["serving"]
    robots_need = served["requests"] * served["latency"]["mean"] / served["robots"] / 1000
    batches_need = served["batches"] * served["inference"]["min"] / 1000
    served["duration_s"] = robots_need * 1.05 + (batches_need / 1.05 - robots_need * 1.05) * t
    rederive_rates(document)


def stalls_longer_than_latency(document: dict, k: float) -> None:
    served = document["serving"]
    served["stall"] = scaled_stats(served["latency"], k)
    served["late_share"] = 1.0
    for row in served["per_robot"]:
        row["late_share"] = 1.0


def longer_serving(document: dict, k: float) -> None:
    document["serving"]["duration_s"] *= k
    rederive_rates(document)


def claims_the_target(document: dict, _: float) -> None:
    document["control"].update(meets_target=True, reason=None)


def latency_interval_outside(document: dict, _: float) -> None:
    latency = document["serving"]["latency"]
    latency["intervals"]["p50"] = [latency["min"] * 0.5, latency["max"] * 2]


def cost_shared_by(document: dict, k: float) -> None:
    document["cost"]["robots_per_device"] *= k
    recost(document)


def _int(value: object, k: float) -> int:
    return int(value * k)


# fmt: off
FORGERIES: tuple[Forgery, ...] = (
    # plain run: timing
    Forgery("e2e one sample short and 1.5 ms", "plain", "equal sample counts", "timing.phases.e2e.count",
            short_fast_e2e, 0.2, 20.0, 1.5),
    Forgery("p90 not of the samples", "plain", "statistics of the samples", "timing.samples_ms.e2e.p90",
            statistic_between("p90", "p50"), 0.0, 0.9, 0.5),
    Forgery("mean not of the samples", "plain", "statistics of the samples", "timing.samples_ms.e2e.mean",
            statistic_between("mean", "min"), 0.0, 0.9, 0.5),
    Forgery("stdev not of the samples", "plain", "statistics of the samples", "timing.samples_ms.e2e.stdev",
            narrower_stdev, 0.05, 0.9, 0.3),
    Forgery("samples ten times their statistics", "plain", "statistics of the samples", "timing.samples_ms.e2e",
            lambda d, k: d["timing"]["samples_ms"].update(e2e=[v * k for v in d["timing"]["samples_ms"]["e2e"]]),
            1.1, 1e3, 10.0),
    Forgery("p99 interval below every sample", "plain", "interval from the samples",
            "timing.samples_ms.e2e.intervals.p99", interval_below_every_sample("e2e"), 0.05, 0.95, 0.6),
    Forgery("action longer than the end-to-end", "plain", "part within the whole", "timing.phases.action",
            action_beyond_e2e, 0.1, 1e3, 1.5),
    Forgery("prefix a fraction of vision + prefill", "plain", "prefix = vision + prefill", "timing.phases.prefix",
            lambda d, k: scale_samples(d, "prefix", k), 0.05, 0.6, 0.5),
    Forgery("steps longer than their action phase", "plain", "action = its steps", "timing.denoise_steps",
            steps_times, 3.0, 1e3, 3.0),
    Forgery("more inferences than the timed duration holds", "plain", "inferences within the timed duration",
            "timing.iterations", lambda d, k: d["timing"].update(timed_duration_s=d["timing"]["timed_duration_s"] / k),
            10.0, 1e4, 100.0),
    # plain run: clock, energy, memory
    Forgery("a run in 2099", "plain", "time bounded by now", "finished_utc", in_the_future, 1.0, 100.0, 73.0),
    Forgery("timed longer than the run lasted", "plain", "timed within the run", "timing.timed_duration_s",
            times("timing.timed_duration_s"), 100.0, 1e5, 1000.0),
    Forgery("1 MJ per inference from a stretched window", "plain", "timed within the run", "energy.window_s",
            stretched_window, 100.0, 1e9, 1e6),
    Forgery("1 MJ per inference", "plain", "energy = power x time", "energy.joules_per_inference",
            per_inference_joules, 10.0, 1e9, 1e6),
    Forgery("energy above idle not from the power", "plain", "energy above idle", "energy.dynamic_joules_per_inference",
            times("energy.dynamic_joules_per_inference"), 2.0, 1e3, 5.0),
    Forgery("energy per action not per inference", "plain", "energy per action = per inference / actions",
            "energy.joules_per_action", times("energy.joules_per_action"), 2.0, 1e3, 7.0),
    Forgery("50 kW average power", "plain", "power within the device", "energy.average_w", average_watts,
            100.0, 1e6, 5e4),
    Forgery("measured label on a TDP estimate", "plain", "label of the method", "energy.label", measured_label,
            0.0, 1.0, 0.0),
    Forgery("a 5 PB memory peak", "plain", "memory within the device", "memory.peak_rss_bytes",
            _set("memory.peak_rss_bytes", lambda v, k: int(k)), 1e13, 1e18, 5e15),
    Forgery("a peak of 1% of the weights", "plain", "memory holds the weights", "memory.peak_rss_bytes",
            fraction_of_weights, 1e-4, 0.9, 0.01),
    Forgery("weights below their precision's bytes", "plain", "weights at the stored precision",
            "memory.weights_bytes", weights_below_precision, 1e-4, 0.9, 0.01),
    Forgery("parameters in memory not the model's", "plain", "weights of the model", "memory.params",
            _set("memory.params", _int), 2.0, 1e3, 10.0),
    # plain run: control and cost
    Forgery("inference rate 10x the latency's", "plain", "throughput from latency", "control.inference_hz_p50",
            times("control.inference_hz_p50"), 1.5, 1e3, 10.0),
    Forgery("cost per action off by 100x", "plain", "cost per action = cost per hour / actions per hour",
            "cost.usd_per_million_actions",
            times("cost.usd_per_million_actions"), 1.5, 1e4, 100.0),
    Forgery("hardware $/h not from price, lifetime and duty", "plain", "hardware cost = price / operating hours",
            "cost.hardware_usd_per_robot_hour", cost_figure("hardware_usd_per_robot_hour"), 0.01, 0.5, 0.1),
    Forgery("electricity $/h not kWh x price", "plain", "electricity cost = kWh x price",
            "cost.electricity_usd_per_robot_hour", cost_figure("electricity_usd_per_robot_hour"), 2.0, 1e3, 10.0),
    Forgery("$/h not hardware + electricity", "plain", "cost per hour = hardware + electricity",
            "cost.usd_per_robot_hour", cost_figure("usd_per_robot_hour"), 0.01, 0.5, 0.2),
    Forgery("busy 150% of the hour", "plain", "busy at most all of the hour", "cost.busy_fraction",
            _set("cost.busy_fraction", lambda v, k: k), 1.01, 1e3, 1.5),
    Forgery("actions per hour not the latency's", "plain", "cost model", "cost.actions_per_robot_hour",
            cost_figure("actions_per_robot_hour"), 2.0, 1e3, 10.0),
    # plain run: cold start and windows
    Forgery("stages three times the preparation", "plain", "stages within the preparation", "cold_start.stages",
            stages_beyond_preparation, 1.5, 1e3, 3.0),
    Forgery("first action before the first inference", "plain", "first action = preparation + first inference",
            "cold_start.to_first_action_s", times("cold_start.to_first_action_s"), 1e-3, 0.5, 0.01),
    Forgery("a preparation before the run", "plain", "a time of the preparation", "cold_start.prepare_s",
            _set("cold_start.prepare_s", lambda v, k: -k), 1e-3, 1e6, 1.0),
    Forgery("a stage no backend has", "plain", "stages of a preparation", "cold_start.stages",
            lambda d, k: d["cold_start"]["stages"].update(warp={"seconds": 0, "cached": False}), 0.0, 1.0, 0.0),
    Forgery("windows holding more inferences than the pass", "plain", "windows of the pass", "sustained.windows",
            _set("sustained.windows.0.count", lambda v, k: v + int(k)), 1.0, 1e4, 7.0),
    Forgery("a window slower than the whole pass", "plain", "a window within the pass", "sustained.windows.0",
            window_beyond_pass, 1.5, 1e3, 5.0),
    Forgery("windows running backwards", "plain", "time runs forward", "sustained", windows_backwards,
            0.0, 1.0, 0.0),
    Forgery("an idle probe's latency without its idle period", "plain", "an idle probe", "cold_start.after_idle_ms",
            idle_probe_half, 0.0, 1.0, 0.0),
    # robots served in process
    Forgery("robots seeing 1/10 of the server's inference", "served", "latency holds the server's time",
            "serving.inference", robots_faster_than_the_server, 3.0, 1e3, 10.0),
    Forgery("100x the actions/s the requests allow", "served", "actions from the requests", "serving.actions_per_s",
            times("serving.actions_per_s"), 1.5, 1e4, 100.0),
    Forgery("a mean batch 50x the maximum", "served", "batches of the requests", "serving.mean_batch",
            mean_batch_times, 3.0, 1e3, 50.0),
    Forgery("500 robots with 3 per-robot rows", "served", "a row per robot", "serving.per_robot",
            robots_without_rows, 4.0, 1e4, 500.0),
    Forgery("two rows for one robot", "served", "a row per robot", "serving.per_robot", duplicate_robot,
            0.0, 1.0, 0.0),
    Forgery("a request per 50 periods", "served", "a request per period", "serving.request_period_ms",
            times("serving.request_period_ms"), 2.0, 1e3, 50.0),
    Forgery("batches faster than the server runs them", "served", "batches one after another", "serving.batches",
            batches_too_fast, 0.0, 1.0, 0.5),
    Forgery("energy per action per robot off by 10x", "served", "energy per action per robot",
            "serving.joules_per_action", times("serving.joules_per_action"), 1.5, 1e3, 10.0),
    Forgery("more robots asked for than served", "served", "robots of the run", "serving.robots",
            _set("config.robots", lambda v, k: v + int(k)), 1.0, 1e3, 5.0),
    Forgery("served longer than the run lasted", "served", "timed within the run", "serving.duration_s",
            longer_serving, 100.0, 1e5, 1000.0),
    Forgery("a CoV that is not stdev / mean", "served", "moments of the samples", "serving.latency.cov",
            times("serving.latency.cov"), 2.0, 1e3, 5.0),
    Forgery("a p50 interval beyond the samples", "served", "interval from the samples",
            "serving.latency.intervals.p50", latency_interval_outside, 0.0, 1.0, 0.0),
    # robots served over gRPC (run --remote)
    Forgery("a judged p99 faster than every robot's reply", "offload", "interval from the samples",
            "serving.latency.intervals.p99", interval_below_every_sample("latency"), 0.05, 0.95, 0.6),
    Forgery("an upper end below the robots' p50", "offload", "interval from the samples",
            "serving.latency.intervals.p50", upper_end_below_p50, 0.0, 0.95, 0.5),
    Forgery("a missed target claimed met", "offload", "throughput from latency", "control.meets_target",
            claims_the_target, 0.0, 1.0, 0.0),
    Forgery("robots served longer than the run lasted", "offload", "timed within the run", "serving.duration_s",
            longer_serving, 100.0, 1e5, 1000.0),
    Forgery("over-the-network robots faster than the server", "offload", "latency holds the server's time",
            "serving.inference", robots_faster_than_the_server, 3.0, 1e3, 10.0),
    Forgery("more requests than the robots can send", "offload", "requests the robots can send", "serving.requests",
            duration_over, 3.0, 1e3, 20.0),
    Forgery("a queue entry per request and then some", "offload", "one entry per request", "serving.queue.count",
            more_entries, 1.0, 1e4, 12.0),
    Forgery("stalls longer than the latency", "offload", "stalls within the latency", "serving.stall",
            stalls_longer_than_latency, 1.5, 1e3, 2.0),
    Forgery("the hour shared by more robots than served", "offload", "cost model", "cost.robots_per_device",
            cost_shared_by, 2.0, 1e3, 10.0),
)
# fmt: on
