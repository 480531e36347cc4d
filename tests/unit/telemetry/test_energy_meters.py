"""Energy meters on recorded formats: tegrastats lines, sysfs trees (INA3221, RAPL), CSV power logs, NVML bitmasks."""

from __future__ import annotations

import importlib
import json
import math
import re
import sys
import time
import types
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.support import paths, recorded
from tests.support.recorded import recorded_lines
from vlabench.errors import InputError, UnavailableError
from vlabench.telemetry.energy import (
    EnergyReading,
    EstimatedMeter,
    ExternalCsvMeter,
    JetsonInaMeter,
    NvmlEnergyCounterMeter,
    NvmlPowerPollingMeter,
    PowerPoller,
    ProcessCpuUtilization,
    RaplMeter,
    TegrastatsMeter,
    decode_clock_event_reasons,
    discover_ina3221_rails,
    discover_rapl_zones,
    integrate_power,
    nvml_device_state,
    nvml_meter,
    parse_tegrastats_line,
    select_total_rails,
)
from vlabench.telemetry.energy.nvml import CLOCK_EVENT_REASON_BITS, clock_event_reason_bits
from vlabench.telemetry.energy.rapl import counter_delta

DATA = paths.DATA / "energy"
RAPL_MAX = 262143328850


def build_tree(name: str, root: Path) -> Path:
    return recorded.build_tree(DATA / name, root)


def clock(*times: float):
    values = iter(times)
    return lambda: next(values)


# --- integration and polling -------------------------------------------------------------------------------------


def test_integrate_power_constant_ramp_and_clipping():
    assert integrate_power([(0.0, 5.0), (1.0, 5.0), (2.0, 5.0)], 0.0, 2.0) == pytest.approx(10.0)
    ramp = [(0.0, 0.0), (2.0, 20.0)]
    assert integrate_power(ramp, 0.0, 2.0) == pytest.approx(20.0)
    assert integrate_power(ramp, 0.5, 1.5) == pytest.approx(10.0)  # edges interpolated: 5 W and 15 W
    assert integrate_power(list(reversed(ramp)), 0.5, 1.5) == pytest.approx(10.0)


def test_integrate_power_holds_outside_the_samples_and_keeps_steps():
    assert integrate_power([(1.0, 10.0), (2.0, 10.0)], 0.0, 3.0) == pytest.approx(30.0)
    assert integrate_power([(5.0, 7.0)], 0.0, 2.0) == pytest.approx(14.0)
    step_down = [(0.0, 10.0), (1.0, 10.0), (1.0, 0.0), (2.0, 0.0)]
    assert integrate_power(step_down, 0.0, 2.0) == pytest.approx(10.0)
    assert integrate_power([(0.0, 1.0)], 2.0, 2.0) == 0.0
    with pytest.raises(ValueError):
        integrate_power([], 0.0, 1.0)


def test_energy_reading_average_power():
    assert EnergyReading(joules=30.0, duration_s=2.0, samples=3).average_w == 15.0
    assert EnergyReading(joules=0.0, duration_s=0.0, samples=2).average_w == 0.0


def test_power_poller_integrates_what_it_samples_never_faster_than_its_period():
    """Constant power integrates exactly over the poller's own window, however few samples a busy host allows; the
    poller never samples more than once a period (plus its start and stop samples)."""
    poller = PowerPoller(lambda: 25.0, period_s=0.02)
    poller.start()
    time.sleep(0.1)
    reading = poller.stop()
    assert reading.joules == pytest.approx(25.0 * reading.duration_s, rel=1e-9)
    assert 2 <= reading.samples <= reading.duration_s / 0.02 + 2


def test_power_poller_reports_a_failing_sensor_at_stop():
    calls: list[float] = []

    def read() -> float:
        if calls:
            raise OSError("sensor vanished")
        calls.append(1.0)
        return 1.0

    poller = PowerPoller(read, period_s=0.01)
    poller.start()
    time.sleep(0.05)
    with pytest.raises(OSError, match="sensor vanished"):
        poller.stop()
    with pytest.raises(RuntimeError, match="without start"):
        poller.stop()


# --- tegrastats ---------------------------------------------------------------------------------------------------


def tegrastats_expected() -> dict[tuple[str, int], dict]:
    """(file, line index) -> what that recorded line parses to (``tests/data/energy/tegrastats_expected.json``)."""
    expected = {}
    for line in json.loads((DATA / "tegrastats_expected.json").read_text())["lines"]:
        fields = {key: tuple(value) if isinstance(value, list) else value for key, value in line.items()}
        fields["rails"] = {rail: tuple(pair) for rail, pair in line["rails"].items()}
        rails, scope, watts = line["total"]
        fields["total"] = (tuple(rails), scope, watts)
        if "timestamp" in fields:
            fields["timestamp"] = datetime.fromisoformat(fields["timestamp"])
        expected[(fields.pop("file"), fields.pop("index"))] = fields
    return expected


TEGRASTATS_EXPECTED = tegrastats_expected()


def test_every_recorded_tegrastats_line_has_an_expectation():
    recorded = {(f.name, i) for f in DATA.glob("tegrastats_*.txt") for i in range(len(recorded_lines(f.name)))}
    assert recorded == set(TEGRASTATS_EXPECTED)


@pytest.mark.parametrize(("name", "index"), sorted(TEGRASTATS_EXPECTED))
def test_parse_recorded_tegrastats_line(name: str, index: int):
    expected = TEGRASTATS_EXPECTED[(name, index)]
    sample = parse_tegrastats_line(recorded_lines(name)[index])
    assert sample.timestamp == expected.get("timestamp")
    assert (sample.ram_used_mb, sample.ram_total_mb) == expected["ram"]
    assert sample.swap_total_mb is not None
    assert len(sample.cpus) == expected["cores"]
    assert sum(core.load_pct is None for core in sample.cpus) == expected["off"]
    assert (sample.cpus[0].load_pct, sample.cpus[0].freq_mhz) == expected["first_core"]
    assert (sample.gr3d_load_pct, sample.gr3d_freq_mhz) == expected["gr3d"]
    assert (sample.emc_load_pct, sample.emc_freq_mhz) == expected["emc"]
    assert sample.rails_mw == expected["rails"]
    for sensor, celsius in expected["temps"].items():
        assert sample.temperatures_c[sensor] == celsius
    rails, scope, watts = expected["total"]
    assert select_total_rails(sample.rails_mw) == (rails, scope)
    assert sum(sample.rails_mw[r][0] for r in rails) / 1e3 == pytest.approx(watts)


def test_tegrastats_gpc_clocks_report_the_highest():
    sample = parse_tegrastats_line("RAM 1/2MB CPU [off] GR3D_FREQ 37%@[612,918] VDD_IN 1mW/1mW")
    assert (sample.gr3d_load_pct, sample.gr3d_freq_mhz) == (37, 918)
    assert sample.cpus[0].load_pct is None


def test_parse_tegrastats_rejects_other_lines():
    with pytest.raises(InputError, match="not a tegrastats line"):
        parse_tegrastats_line("Warning: some sensors are only readable by root")


def test_total_rail_priority():
    assert select_total_rails(["VDD_SOC", "VDD_IN", "POM_5V_IN"]) == (("VDD_IN",), "module")
    assert select_total_rails(["POM_5V_GPU", "POM_5V_IN"]) == (("POM_5V_IN",), "module")
    # VIN_SYS_5V0 is only the AGX modules' 5 V input: the other supplies are added, never dropped
    assert select_total_rails(["VIN_SYS_5V0", "VDD_GPU_SOC", "NC"]) == (
        ("VDD_GPU_SOC", "VIN_SYS_5V0"),
        "module-rails-sum",
    )


def orin_nano_line(vdd_in_mw: int) -> str:
    return recorded_lines("tegrastats_jp6.txt")[0].replace("VDD_IN 4861mW/", f"VDD_IN {vdd_in_mw}mW/")


def test_tegrastats_meter_integrates_recorded_lines():
    # VDD_IN ramps as 4 W + 10 W/s from t = 0 to 1 s; the window [0.25, 0.65] holds 4 + 5 (0.65² - 0.25²) = 3.4 J
    lines = [(0.05, "tegrastats: warning, running without root")]
    lines += [(i / 10, orin_nano_line(4000 + 1000 * i)) for i in range(11)]
    meter = TegrastatsMeter(interval_ms=100, lines=sorted(lines), clock=clock(0.25, 0.65))
    meter.start()
    reading = meter.stop()
    meter.close()
    assert reading.joules == pytest.approx(3.4)
    assert reading.duration_s == pytest.approx(0.4)
    assert reading.samples == 4
    assert meter.describe()["rails"] == ["VDD_IN"]
    assert meter.scope == "module"


def test_tegrastats_meter_sums_agx_rails():
    line = recorded_lines("tegrastats_jp5.txt")[0]
    meter = TegrastatsMeter(lines=[(0.0, line), (1.0, line)], clock=clock(0.0, 1.0))
    meter.start()
    assert meter.stop().joules == pytest.approx(7.126)
    assert meter.scope == "module-rails-sum"
    meter.close()


def test_tegrastats_meter_without_the_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UnavailableError, match="tegrastats not found"):
        TegrastatsMeter()


# --- INA3221 sysfs ------------------------------------------------------------------------------------------------


def test_ina3221_hwmon_power_is_millivolts_times_milliamps(tmp_path: Path):
    rails = discover_ina3221_rails(build_tree("sysfs_orin_nano_jp6.tree", tmp_path))
    assert sorted(rails) == ["VDD_CPU_GPU_CV", "VDD_IN", "VDD_SOC"]  # "sum of shunt voltages" has no current
    assert rails["VDD_IN"].watts() == pytest.approx(5064 * 960 / 1e6)
    assert rails["VDD_SOC"].watts() == pytest.approx(1.362, abs=1e-3)


def test_ina3221_iio_power_is_milliwatts(tmp_path: Path):
    rails = discover_ina3221_rails(build_tree("sysfs_xavier_nx_jp4.tree", tmp_path))
    assert {name: rail.watts() for name, rail in rails.items()} == {
        "VDD_IN": 4.053,
        "VDD_CPU_GPU_CV": 0.490,
        "VDD_SOC": 1.265,
    }


@pytest.mark.parametrize(
    ("tree", "rails", "scope", "watts"),
    [
        ("sysfs_orin_nano_jp6.tree", ["VDD_IN"], "module", 5064 * 960 / 1e6),
        ("sysfs_xavier_nx_jp4.tree", ["VDD_IN"], "module", 4.053),
        ("sysfs_nano_jp4.tree", ["POM_5V_IN"], "module", 1.750),
        (
            "sysfs_agx_orin_jp5.tree",
            ["VDDQ_VDD2_1V8AO", "VDD_CPU_CV", "VDD_GPU_SOC", "VIN_SYS_5V0"],
            "module-rails-sum",
            (19040 * 147 + 19040 * 21 + 5024 * 722 + 5024 * 60) / 1e6,
        ),
    ],
)
def test_jetson_ina_meter_picks_the_total_rail(tmp_path: Path, tree: str, rails: list[str], scope: str, watts: float):
    with JetsonInaMeter(root=build_tree(tree, tmp_path), period_s=0.01) as meter:
        meter.start()
        time.sleep(0.03)
        reading = meter.stop()
    assert reading.average_w == pytest.approx(watts)
    assert reading.samples >= 2
    described = meter.describe()
    assert (described["method"], described["scope"], described["label"]) == ("jetson-ina3221", scope, "measured")
    assert described["rails"] == rails
    assert "NC" not in described["other_rails"]
    assert all(Path(f).is_file() for f in described["sensor_files"])


def test_jetson_ina_meter_follows_the_sysfs_values(tmp_path: Path):
    root = build_tree("sysfs_orin_nano_jp6.tree", tmp_path)
    current = next(root.glob("sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*/curr1_input"))
    with JetsonInaMeter(root=root, period_s=0.01) as meter:
        current.write_text("1920\n")
        meter.start()
        reading = meter.stop()
    assert reading.average_w == pytest.approx(5064 * 1920 / 1e6)


def test_jetson_ina_meter_without_rails(tmp_path: Path):
    with pytest.raises(UnavailableError, match="no INA3221 power rails"):
        JetsonInaMeter(root=tmp_path)


# --- RAPL ---------------------------------------------------------------------------------------------------------


def set_energy(root: Path, zone: str, microjoules: int) -> None:
    (root / "sys/class/powercap" / zone / "energy_uj").write_text(f"{microjoules}\n")


def test_rapl_counter_delta_wraps_once():
    assert counter_delta(10, 30, 100) == 20
    assert counter_delta(90, 5, 100) == 16  # 90 -> 100, wrap to 0, -> 5
    assert counter_delta(RAPL_MAX - 1000, 500, RAPL_MAX) == 1501


def test_rapl_one_package_ignores_core_uncore_psys_and_mmio(tmp_path: Path):
    root = build_tree("sysfs_rapl_laptop.tree", tmp_path)
    assert [z.name for z in discover_rapl_zones(root)] == ["package-0", "core", "uncore", "psys"]
    with RaplMeter(root=root) as meter:
        meter.start()
        set_energy(root, "intel-rapl:0", 1_000_000 + 2_500_000)
        set_energy(root, "intel-rapl:0:0", 9_000_000)
        set_energy(root, "intel-rapl:1", 99_000_000)
        reading = meter.stop()
    assert reading.joules == pytest.approx(2.5)
    assert reading.samples == 2
    assert meter.scope == "package"
    assert [z["name"] for z in meter.describe()["zones"]] == ["package-0"]


def test_rapl_two_packages_with_dram(tmp_path: Path):
    root = build_tree("sysfs_rapl_server.tree", tmp_path)
    with RaplMeter(root=root) as meter:
        meter.start()
        set_energy(root, "intel-rapl:0", 40_000_000 + 3_000_000)
        set_energy(root, "intel-rapl:0:0", 7_000_000 + 500_000)
        set_energy(root, "intel-rapl:1", 41_000_000 + 2_000_000)
        set_energy(root, "intel-rapl:1:0", 6_000_000 + 250_000)
        reading = meter.stop()
    assert reading.joules == pytest.approx(5.75)
    assert meter.scope == "package+dram"
    assert [z["name"] for z in meter.describe()["zones"]] == ["package-0", "dram", "package-1", "dram"]


def test_rapl_wrap_around_between_reads(tmp_path: Path):
    root = build_tree("sysfs_rapl_laptop.tree", tmp_path)
    set_energy(root, "intel-rapl:0", RAPL_MAX - 1000)
    with RaplMeter(root=root) as meter:
        meter.start()
        set_energy(root, "intel-rapl:0", 500)
        reading = meter.stop()
    assert reading.joules == pytest.approx(1501e-6)


def test_rapl_unreadable_counter_says_how_to_fix_it(tmp_path: Path):
    # /proc/sys/vm/drop_caches is write-only (0200) and procfs refuses reads of it even to root
    unreadable = Path("/proc/sys/vm/drop_caches")
    try:
        unreadable.read_text()
    except PermissionError:
        pass
    else:
        pytest.skip("no file that even root cannot read: /proc/sys/vm/drop_caches is readable here")
    root = build_tree("sysfs_rapl_laptop.tree", tmp_path)
    energy = root / "sys/class/powercap/intel-rapl:0/energy_uj"
    energy.unlink()
    energy.symlink_to(unreadable)
    with pytest.raises(UnavailableError, match="CVE-2020-8694") as raised:
        RaplMeter(root=root)
    assert "chmod a+r" in str(raised.value)
    assert "--energy-meter estimated" in str(raised.value)


def test_rapl_without_zones(tmp_path: Path):
    with pytest.raises(UnavailableError, match="no RAPL powercap zones under"):
        RaplMeter(root=tmp_path)


# --- external CSV -------------------------------------------------------------------------------------------------


def test_external_csv_headerless_unix_rows(tmp_path: Path):
    log = tmp_path / "wall.csv"
    log.write_text("".join(f"{1000 + i},100\n" for i in range(11)))
    meter = ExternalCsvMeter(log, clock=clock(1002.5, 1007.5))
    meter.start()
    reading = meter.stop()
    assert reading.joules == pytest.approx(500.0)
    assert reading.samples == 7  # 1002 and 1008 bracket the window, 1003..1007 inside
    described = meter.describe()
    assert (described["method"], described["scope"], described["label"]) == ("external-csv", "wall", "measured")
    assert described["median_sample_spacing_s"] == 1.0


def test_external_csv_iso_timestamps_and_named_power_column(tmp_path: Path):
    start = datetime(2026, 11, 30, 10, 0, 0, tzinfo=timezone.utc).timestamp()
    rows = [f"2026-11-30T10:00:0{i}Z,230.1,0.5,{10 * i}" for i in range(6)]  # 0, 10, ..., 50 W
    log = tmp_path / "wall.csv"
    log.write_text("time,voltage_v,current_a,power_w\n" + "\n".join(rows) + "\n")
    meter = ExternalCsvMeter(log, clock=clock(start + 1.5, start + 3.5))
    meter.start()
    assert meter.stop().joules == pytest.approx(50.0)  # mean of 15 W and 35 W over 2 s


def test_external_csv_w_column_and_partial_last_row(tmp_path: Path):
    log = tmp_path / "wall.csv"
    log.write_text("Time,W\n0,40\n1,40\n2,40\n3,4")  # the logger is still writing the last row
    meter = ExternalCsvMeter(log, clock=clock(0.5, 1.5))
    meter.start()
    assert meter.stop().joules == pytest.approx(40.0)


def test_external_csv_malformed_row_names_file_and_line(tmp_path: Path):
    log = tmp_path / "wall.csv"
    log.write_text("timestamp,watts\n0,40\n1,forty\n2,40\n")
    meter = ExternalCsvMeter(log, clock=clock(0.5, 1.5))
    meter.start()
    with pytest.raises(InputError, match=re.escape(f"{log}:3")):
        meter.stop()


def test_external_csv_header_without_power_column(tmp_path: Path):
    log = tmp_path / "wall.csv"
    log.write_text("timestamp,volts\n0,230\n1,230\n")
    meter = ExternalCsvMeter(log, clock=clock(0.2, 0.8))
    meter.start()
    with pytest.raises(InputError, match="no power column"):
        meter.stop()


@pytest.mark.parametrize(
    ("content", "window"),
    [
        ("100.0,40\n", (100.2, 100.8)),  # one sample only
        ("0,40\n1,40\n2,40\n", (5.0, 6.0)),  # the log ended before the run
        ("10,40\n11,40\n12,40\n", (5.0, 11.5)),  # the logger started after the run
    ],
)
def test_external_csv_log_must_cover_the_run(tmp_path: Path, content: str, window: tuple[float, float]):
    log = tmp_path / "wall.csv"
    log.write_text(content)
    meter = ExternalCsvMeter(log, clock=clock(*window))
    meter.start()
    with pytest.raises(UnavailableError, match="must cover the run with at least two samples"):
        meter.stop()


def test_external_csv_missing_log(tmp_path: Path):
    meter = ExternalCsvMeter(tmp_path / "absent.csv", clock=clock(0.0, 1.0))
    meter.start()
    with pytest.raises(UnavailableError, match="cannot read the power log"):
        meter.stop()


# --- estimated ----------------------------------------------------------------------------------------------------


def test_estimated_meter_with_constant_utilization_matches_the_closed_form():
    meter = EstimatedMeter(
        60.0,
        10.0,
        lambda: 0.25,
        tdp_source="datasheet",
        idle_source="measured at idle",
        utilization_definition="constant 25%",
        period_s=0.01,
    )
    with meter:
        meter.start()
        time.sleep(0.05)
        reading = meter.stop()
    assert reading.joules == pytest.approx((10.0 + 50.0 * 0.25) * reading.duration_s, rel=1e-9)
    described = meter.describe()
    assert (described["method"], described["label"]) == ("estimated-tdp", "estimated")
    assert (described["tdp_w"], described["tdp_source"], described["idle_w"], described["idle_source"]) == (
        60.0,
        "datasheet",
        10.0,
        "measured at idle",
    )
    assert described["utilization"] == "constant 25%"


def test_estimated_meter_clamps_utilization_and_describes_the_default():
    meter = EstimatedMeter(60.0, 10.0, lambda: 3.0, tdp_source="a", idle_source="b", period_s=0.01)
    with meter:
        meter.start()
        reading = meter.stop()
    assert reading.average_w == pytest.approx(60.0)
    assert (
        EstimatedMeter(60.0, 10.0, tdp_source="a", idle_source="b")
        .describe()["utilization"]
        .startswith("this process's CPU time")
    )
    with pytest.raises(ValueError):
        EstimatedMeter(10.0, 60.0, tdp_source="a", idle_source="b")


def test_process_cpu_utilization_sees_this_process_working():
    utilization = ProcessCpuUtilization()
    assert utilization() == 0.0
    spent = time.process_time() + 0.01
    while time.process_time() < spent:  # this process's own CPU time: however busy the host, it advances
        pass
    assert 0.0 < utilization() <= 1.0 + 1e-6


# --- NVML ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0x0, []),
        (0x1, ["GpuIdle"]),  # idle GPU
        (0x4, ["SwPowerCap"]),  # at the power limit under load
        (0x5, ["GpuIdle", "SwPowerCap"]),
        (0x60, ["SwThermalSlowdown", "HwThermalSlowdown"]),
        (0x88, ["HwSlowdown", "HwPowerBrakeSlowdown"]),
        (0x104, ["SwPowerCap", "DisplayClockSetting"]),
        (0x1004, ["SwPowerCap", "Unknown(0x1000)"]),
    ],
)
def test_decode_clock_event_reasons(mask: int, names: list[str]):
    assert decode_clock_event_reasons(mask) == names


def test_clock_event_reason_bits_come_from_the_pynvml_constants():
    module = types.SimpleNamespace(
        nvmlClocksEventReasonNone=0x0,
        nvmlClocksEventReasonSwPowerCap=0x4,
        nvmlClocksThrottleReasonUserDefinedClocks=0x2,
        nvmlClocksThrottleReasonBoardLimit=0x200,
        nvmlClocksThrottleReasonAll=0x7FF,
    )
    bits = clock_event_reason_bits(module)  # type: ignore[arg-type]
    assert bits["BoardLimit"] == 0x200
    assert not {"None", "All", "UserDefinedClocks"} & set(bits)
    assert decode_clock_event_reasons(0x204, bits) == ["SwPowerCap", "BoardLimit"]


def test_clock_event_reason_table_agrees_with_installed_pynvml():
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    for name, bit in CLOCK_EVENT_REASON_BITS.items():
        assert getattr(pynvml, f"nvmlClocksThrottleReason{name}") == bit


def test_nvml_missing_bindings_say_what_to_install(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(UnavailableError, match="pip install nvidia-ml-py"):
        nvml_meter(0)


def test_nvml_polling_refuses_periods_under_50_ms():
    with pytest.raises(InputError, match=r"at least 0\.05 s"):
        NvmlPowerPollingMeter(0, period_s=0.01)


class FakeNvml(types.ModuleType):
    """The slice of pynvml the meters call, for a GPU with or without the energy counter."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    def __init__(self, has_counter: bool) -> None:
        super().__init__("pynvml")
        self.has_counter = has_counter
        self.open = 0
        self.energy_mj = 1_000_000

    def nvmlInit(self) -> None:
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.open -= 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetName(self, device: str) -> bytes:
        return b"NVIDIA Fake"

    def nvmlDeviceGetTotalEnergyConsumption(self, device: str) -> int:
        if not self.has_counter:
            raise self.NVMLError_NotSupported()
        self.energy_mj += 1500
        return self.energy_mj

    def nvmlDeviceGetPowerUsage(self, device: str) -> int:
        return 75_000


@pytest.mark.parametrize("has_counter", [True, False])
def test_nvml_meter_prefers_the_counter(monkeypatch: pytest.MonkeyPatch, has_counter: bool):
    fake = FakeNvml(has_counter)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with nvml_meter(0, period_s=0.05) as meter:
        meter.start()
        reading = meter.stop()
        assert meter.describe()["gpu_name"] == "NVIDIA Fake"
    if has_counter:
        assert isinstance(meter, NvmlEnergyCounterMeter)
        assert reading.joules == pytest.approx(1.5)
    else:
        assert isinstance(meter, NvmlPowerPollingMeter)
        assert reading.average_w == pytest.approx(75.0)
        assert "1 s moving average" in meter.describe()["warning"]
    assert fake.open == 0


@pytest.fixture
def nvml_gpu() -> Iterator[None]:
    try:
        pynvml = importlib.import_module("pynvml")
        pynvml.nvmlInit()
    except Exception:
        pytest.skip("no NVIDIA GPU / NVML on this host")
    pynvml.nvmlShutdown()
    yield


def test_nvml_meter_on_a_real_gpu(nvml_gpu: None):
    with nvml_meter(0) as meter:
        meter.start()
        time.sleep(0.3)
        reading = meter.stop()
    assert meter.method in ("nvml-energy-counter", "nvml-power-polling")
    assert reading.joules >= 0.0
    assert math.isfinite(reading.average_w)


def test_nvml_device_state_on_a_real_gpu(nvml_gpu: None):
    state = nvml_device_state(0)
    assert state["name"]
    assert set(state) >= {"sm_clock_mhz", "memory_clock_mhz", "power_limit_w", "temperature_c", "clock_event_reasons"}
    assert state["clock_event_mask"] is None or all(isinstance(r, str) for r in state["clock_event_reasons"])
