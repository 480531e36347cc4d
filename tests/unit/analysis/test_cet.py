import pandas as pd
import pytest

from vlabench.analysis.cet import (
    CostAssumptions,
    ExecutionModel,
    cost_report,
    delivered_hz,
    feasibility,
    pareto_front,
    rank,
)
from vlabench.errors import InputError


def report(**overrides):
    values = dict(
        price_usd=2000.0,
        price_source="list price",
        price_estimate=False,
        joules_per_inference=10.0,
        idle_w=5.0,
        energy_label="measured",
        latency_p50_ms=100.0,
        execution=ExecutionModel(mode="async", actions_per_chunk=5),
        control_hz=10.0,
        assumptions=CostAssumptions(lifetime_years=2.0, duty_cycle=0.5, electricity_usd_per_kwh=0.2),
    )
    values.update(overrides)
    return cost_report(**values)


def test_cost_model_closed_form():
    cost = report()
    # async, 5 actions per chunk: 10 actions/s -> 2 inferences/s -> 7200/h, busy 720 s/h; idle the other 2880 s at 5 W.
    assert cost.actions_per_robot_hour == pytest.approx(36_000)
    assert cost.busy_fraction == pytest.approx(0.2)
    joules = 7200 * 10.0 + 2880 * 5.0
    assert cost.energy_kwh_per_robot_hour == pytest.approx(joules / 3.6e6)
    assert cost.electricity_usd_per_robot_hour == pytest.approx(joules / 3.6e6 * 0.2)
    hardware = 2000.0 / (2 * 8760 * 0.5)
    assert cost.hardware_usd_per_robot_hour == pytest.approx(hardware)
    assert cost.usd_per_robot_hour == pytest.approx(hardware + joules / 3.6e6 * 0.2)
    assert cost.usd_per_million_actions == pytest.approx(cost.usd_per_robot_hour / 36_000 * 1e6)
    assert cost.basis == "hardware+electricity"
    assert cost.execution == ExecutionModel(mode="async", actions_per_chunk=5)


def test_per_step_cost_counts_one_action_per_inference():
    cost = report(execution=ExecutionModel())
    # 10 inferences/s of 100 ms each: 36000 inferences per hour, busy the whole hour, one action from each.
    assert cost.actions_per_robot_hour == pytest.approx(36_000)
    assert cost.busy_fraction == pytest.approx(1.0)
    assert cost.energy_kwh_per_robot_hour == pytest.approx(36_000 * 10.0 / 3.6e6)


def test_a_slow_policy_delivers_its_own_rate_and_is_busy_all_the_time():
    chunked = ExecutionModel(mode="async", actions_per_chunk=5)
    cost = report(latency_p50_ms=1000.0, execution=chunked)
    assert delivered_hz(1000.0, 10.0, chunked) == pytest.approx(5.0)
    assert cost.actions_per_robot_hour == pytest.approx(18_000)
    assert cost.busy_fraction == pytest.approx(1.0)


def test_no_price_gives_an_electricity_only_cost():
    cost = report(price_usd=None, price_source=None)
    assert cost.basis == "electricity-only"
    assert cost.hardware_usd_per_robot_hour is None
    assert cost.usd_per_robot_hour == pytest.approx(cost.electricity_usd_per_robot_hour)


def row(name, p50, p99, joules, dollars, apc=5, need=1.0, memory=8.0, **extra):
    return dict(
        model=name,
        latency_p50_ms=p50,
        latency_p99_ms=p99,
        execution="async",
        actions_per_chunk=apc,
        memory_needed_gb=need,
        device_memory_gb=memory,
        joules_per_action=joules,
        usd_per_million_actions=dollars,
        **extra,
    )


def test_feasibility_gate_names_every_failed_condition():
    verdict, reasons = feasibility(row("a", 100, 400, 1, 1), control_hz=10)
    assert verdict.meets_target and reasons == []
    failing = row("b", 100, 600, 1, 1, need=20.0, memory=12.0, valid=False, device_memory_nameplate_gb=16.0)
    verdict, reasons = feasibility(failing, control_hz=10)
    assert not verdict.meets_target
    assert reasons == [
        "needs 20.0 GB > 12 GB usable memory (16 GB nameplate)",
        "p99 latency 600 ms > the chunk's 5 actions at 10 Hz (500 ms)",
        "failed the correctness gate",
    ]
    _, per_step = feasibility(row("c", 100, 400, 1, 1), control_hz=10, execution=ExecutionModel())
    assert per_step == ["2.5 inferences/s at p99 < 10 Hz"]
    _, too_long = feasibility(row("d", 1, 1, 1, 1, chunk=8), 10, ExecutionModel(mode="async", actions_per_chunk=50))
    assert too_long == ["executes 50 actions per chunk, the model predicts 8"]


def test_pareto_front_keeps_only_non_dominated_rows():
    frame = pd.DataFrame([[1, 3], [2, 2], [3, 1], [3, 3], [2, 2]], columns=["x", "y"])
    assert pareto_front(frame, ["x", "y"]).tolist() == [True, True, True, False, True]


def test_rank_gates_then_orders_by_priority():
    frame = pd.DataFrame(
        [
            row("fast-costly", 50, 60, 2.0, 9.0),
            row("slow-cheap", 300, 480, 0.5, 1.0),
            row("too-slow", 900, 1000, 0.1, 0.1),
            row("too-big", 40, 45, 0.2, 0.2, need=100.0),
            row("no-price", 60, 70, 1.0, float("nan")),
        ]
    )
    by_cost = rank(frame, "cost", control_hz=10)
    assert by_cost["model"].tolist()[:2] == ["slow-cheap", "fast-costly"]
    assert by_cost.set_index("model").loc["no-price", "feasible"]
    assert pd.isna(by_cost.set_index("model").loc["no-price", "rank"])
    assert not by_cost.set_index("model").loc["too-slow", "feasible"]
    assert "memory" in by_cost.set_index("model").loc["too-big", "reasons"]
    by_time = rank(frame, "time", control_hz=10)
    assert by_time["model"].tolist()[:3] == ["fast-costly", "no-price", "slow-cheap"]
    by_energy = rank(frame, "energy", control_hz=1)
    assert by_energy["model"].iloc[0] == "too-slow"
    pareto = by_cost.set_index("model")["pareto"]
    assert pareto["fast-costly"] and pareto["slow-cheap"]
    with pytest.raises(InputError, match="Valid priorities"):
        rank(frame, "speed", control_hz=10)


def test_pareto_uses_cost_only_when_every_feasible_row_has_one():
    from vlabench.analysis.cet import pareto_axes

    full = pd.DataFrame([row("a", 1, 1, 1.0, 2.0), row("b", 2, 2, 0.5, 1.0)])
    assert pareto_axes(full) == ["latency_p50_ms", "joules_per_action", "usd_per_million_actions"]
    partial = pd.DataFrame([row("a", 1, 1, 1.0, 2.0), row("b", 2, 2, 0.5, float("nan"))])
    assert pareto_axes(partial) == ["latency_p50_ms", "joules_per_action"]
    ranked = rank(partial, "energy", control_hz=1).set_index("model")
    assert ranked.loc["a", "pareto"] and ranked.loc["b", "pareto"]


def test_a_device_serving_robots_shares_its_hardware_and_idle_power_and_batches_its_inferences():
    common = dict(joules_per_inference=2.0, idle_w=10.0, latency_p50_ms=20.0, execution=ExecutionModel())
    alone = report(**common)
    four = report(**common, robots_per_device=4, rows_per_inference=4)
    assert four.hardware_usd_per_robot_hour == pytest.approx(alone.hardware_usd_per_robot_hour / 4)
    # 36,000 actions an hour, one inference per four of them at 2 J, and a quarter of the device's idle hour
    busy_s = 36_000 / 4 * 0.020
    expected_j = 36_000 / 4 * 2.0 + (3600 / 4 - busy_s) * 10.0
    assert four.energy_kwh_per_robot_hour == pytest.approx(expected_j / 3.6e6)
    assert alone.energy_kwh_per_robot_hour == pytest.approx((36_000 * 2.0 + (3600 - 36_000 * 0.020) * 10.0) / 3.6e6)
