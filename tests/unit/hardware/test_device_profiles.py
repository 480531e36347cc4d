"""The shipped device profiles (profiles/devices/*.yaml): completeness, provenance, paper figures and detection."""

import re
from importlib import resources

import pytest

from vlabench.backends import BACKENDS
from vlabench.hardware.devices import (
    DeviceProfile,
    Figure,
    all_profiles,
    load_device_profile,
    profile_names,
    profile_present,
)
from vlabench.telemetry.energy.select import sensor_names

UNREAD_SENSORS = {"npu-smi"}  # sensors a profile lists that no energy meter reads yet
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

# XPU paper (arXiv 2604.24447) Table 10: peak dense 16-bit TFLOP/s, memory GB, bandwidth GB/s.
TABLE_10 = {
    "ascend-310b": (10, 12, 51.2),
    "ascend-310p": (88, 48, 204.8),
    "arc-pro-b60": (90, 24, 456),
    "jetson-agx-orin-64gb": (42, 64, 204),
    "rtx-4090": (330, 24, 1000),
    "jetson-thor": (258, 128, 273),
}
PAPER_DEVICES = [*TABLE_10, "intel-core-i7-11700"]
PAPER_ESTIMATES = ("jetson-thor", "arc-pro-b60")  # "the authors' estimate (half of INT8 TOPS)"

# Identification strings as the host reports them, and the profile each must select.
IDENTIFICATIONS = [
    ("jetson_model", "NVIDIA Jetson Orin Nano Developer Kit", "jetson-orin-nano-8gb"),
    ("jetson_model", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super", "jetson-orin-nano-8gb"),
    ("jetson_model", "NVIDIA Jetson Orin NX Engineering Reference Developer Kit", "jetson-orin-nx-16gb"),
    ("jetson_model", "NVIDIA Jetson AGX Thor Developer Kit", "jetson-thor"),
    ("cuda_name", "NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("cuda_name", "NVIDIA H100 PCIe", "h100-pcie"),
    ("cuda_name", "NVIDIA H200", "h200"),
    ("cuda_name", "NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("cuda_name", "NVIDIA L4", "l4"),
    ("cuda_name", "NVIDIA L40S", "l40s"),
    ("cuda_name", "NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("cuda_name", "NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("cuda_name", "NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("cuda_name", "NVIDIA GeForce RTX 3060", "rtx-3060"),
    ("cuda_name", "NVIDIA GB10", "dgx-spark"),  # nvidia-smi on a DGX Spark
    ("cpu_model", "11th Gen Intel(R) Core(TM) i7-11700 @ 2.50GHz", "intel-core-i7-11700"),
    ("cpu_model", "11th Gen Intel(R) Core(TM) i7-11700F @ 2.50GHz", "intel-core-i7-11700"),
    ("cpu_model", "Intel(R) Core(TM) Ultra 7 155H", "intel-core-ultra-7-155h"),
    ("cpu_model", "Raspberry Pi 5 Model B Rev 1.0", "raspberry-pi-5"),
    ("openvino_device", "Intel(R) Arc(TM) Pro B60 Graphics", "arc-pro-b60"),
    ("ascend_chip", "310B4", "ascend-310b"),
    ("ascend_chip", "310P3", "ascend-310p"),
]

# Strings that must select no specific profile: other SKUs whose figures differ from any profile here.
FOREIGN = [
    ("cuda_name", "NVIDIA H100 NVL"),
    ("cuda_name", "NVIDIA H200 NVL"),
    ("cuda_name", "NVIDIA A100 80GB PCIe"),
    ("cuda_name", "NVIDIA L40"),
    ("cuda_name", "NVIDIA GeForce RTX 4090 D"),
    ("cuda_name", "NVIDIA GeForce RTX 4090 Laptop GPU"),
    ("cuda_name", "NVIDIA GeForce RTX 3090 Ti"),
    ("cuda_name", "NVIDIA GeForce RTX 3060 Ti"),
    ("cuda_name", "NVIDIA GeForce RTX 3060 Laptop GPU"),
    ("cuda_name", "NVIDIA RTX A2000"),
    ("cpu_model", "11th Gen Intel(R) Core(TM) i7-11700K @ 3.60GHz"),
    ("cpu_model", "Intel(R) Core(TM) Ultra 7 155U"),
    ("cpu_model", "Raspberry Pi Compute Module 5 Rev 1.0"),
    ("cpu_model", "AMD EPYC 7B13"),
    ("openvino_device", "Intel(R) Arc(TM) Graphics (iGPU)"),
    ("openvino_device", "Intel(R) Core(TM) Ultra 7 155H"),
    ("jetson_model", "NVIDIA IGX Orin Development Kit"),
]

# The one documented exception to "one string, one profile": NVIDIA's carrier reports the same device-tree model
# for the 32 GB and 64 GB AGX Orin; the memory Linux sees tells them apart (see the profiles' notes).
AGX_ORIN_STRING = "NVIDIA Jetson AGX Orin Developer Kit"
AGX_ORIN_VISIBLE_GB = {"jetson-agx-orin-32gb": 30.6, "jetson-agx-orin-64gb": 62.8}


# The HostInfo field each detection rule reads; the plural fields hold every device of that kind.
RULE_FIELDS = {
    "jetson_model": "jetson_model",
    "cuda_name": "cuda_devices",
    "cpu_model": "cpu_model",
    "openvino_device": "openvino_devices",
    "ascend_chip": "ascend_chips",
}


def host_reporting(make_host, rule: str, value: str, memory_gb: float = 62.8):
    field = RULE_FIELDS[rule]
    extra = {"arch": "aarch64"} if rule in ("jetson_model", "ascend_chip") or "Raspberry" in value else {}
    return make_host(**extra, memory_gb=memory_gb, **{field: (value,) if field.endswith("s") else value})


def is_generic(profile: DeviceProfile) -> bool:
    return profile.name.startswith("generic-")


def datasheet_profiles() -> list[DeviceProfile]:
    return [p for p in all_profiles() if not is_generic(p) and not p.ceilings_measured]


def figures(profile: DeviceProfile) -> list[tuple[str, Figure]]:
    found = [(key, getattr(profile, key)) for key in ("memory_gb", "bandwidth_gbs", "tdp_w", "idle_w")]
    found += [(f"peak_tflops.{k}", v) for k, v in profile.peak_tflops.items()]
    for engine_name, engine in profile.engines.items():
        found += [(f"engines.{engine_name}.peak_tflops.{k}", v) for k, v in engine.peak_tflops.items()]
    return [(key, figure) for key, figure in found if figure is not None]


def matching(rule: str, value: str) -> list[str]:
    """Non-generic profiles whose `rule` regex matches `value` (the same case-insensitive search detection uses)."""
    return [
        p.name
        for p in all_profiles()
        if not is_generic(p) and getattr(p.detect, rule) and re.search(getattr(p.detect, rule), value, re.IGNORECASE)
    ]


def test_at_least_twenty_profiles_ship_and_all_validate():
    names = profile_names()
    assert len(names) >= 20
    assert [p.name for p in all_profiles()] == names
    assert {*PAPER_DEVICES, "generic-x86-cpu", "generic-arm-cpu"} <= set(names)


def test_names_are_kebab_case_and_equal_the_file_name():
    folder = resources.files("vlabench.profiles").joinpath("devices")
    stems = sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))
    assert stems == profile_names()
    for name in stems:
        assert KEBAB.match(name), name
        assert load_device_profile(name).name == name


@pytest.mark.parametrize("name", [n for n in profile_names() if not n.startswith("generic-")])
def test_datasheet_profiles_are_complete(name):
    profile = load_device_profile(name)
    assert not profile.ceilings_measured
    assert profile.bandwidth_gbs and profile.tdp_w
    # a socketed CPU's memory is the host's, read at run time: never the platform maximum posing as device memory
    socketed = profile.device_class == "cpu" and "installed" in profile.notes
    assert (profile.memory_gb is None) == socketed, "memory: the device's own, or none for a socketed CPU"
    assert profile.peak_tflops, "at least one peak"
    assert profile.price is not None
    assert profile.price.url.startswith("https://") and profile.price.date and profile.price.source
    assert profile.sensors and "external-csv" in profile.sensors
    assert profile.backends and set(profile.backends) <= set(BACKENDS)
    assert set(profile.sensors) <= sensor_names() | UNREAD_SENSORS
    assert profile.notes


def test_generic_profiles_rely_on_measured_ceilings():
    for name in ("generic-x86-cpu", "generic-arm-cpu"):
        profile = load_device_profile(name)
        assert profile.ceilings_measured and profile.detect.arch
        assert not profile.peak_tflops and profile.tdp_w is None and profile.price is None
        assert "micro-benchmark" in profile.notes


@pytest.mark.parametrize("name", profile_names())
def test_every_figure_says_where_it_came_from(name):
    profile = load_device_profile(name)
    for key, figure in figures(profile):
        assert figure.source.strip(), f"{name}.{key} has no source"
        assert figure.value > 0, f"{name}.{key}"
    for mode in profile.power_modes:
        assert mode.source.strip(), f"{name} power mode {mode.name}"
    if profile.price:
        assert profile.price.source.strip()


def test_computed_or_assumed_figures_are_marked_estimates():
    for profile in all_profiles():
        for key, figure in figures(profile):
            text = figure.source.lower()
            if text.startswith(("computed", "assumption")) or "not vendor-stated" in text:
                assert figure.estimate, f"{profile.name}.{key} reads as derived but is not marked an estimate"


def carries_paper_figure(figure: Figure, paper: float) -> bool:
    """The paper's figure, or a vendor one whose source quotes Table 10's (the paper rounds or estimates)."""
    return "Table 10" in figure.source and (figure.value == paper or f"{paper:g}" in figure.source)


@pytest.mark.parametrize("name", list(TABLE_10))
def test_paper_devices_carry_table_10_figures(name):
    peak, memory, bandwidth = TABLE_10[name]
    profile = load_device_profile(name)
    sixteen_bit = [profile.peak_tflops[p] for p in ("fp16", "bf16") if p in profile.peak_tflops]
    assert any(carries_paper_figure(f, peak) for f in sixteen_bit), sixteen_bit
    assert profile.memory_gb.value == memory and "Table 10" in profile.memory_gb.source
    assert carries_paper_figure(profile.bandwidth_gbs, bandwidth)
    assert "2604.24447" in profile.memory_gb.source


def test_paper_peaks_the_authors_estimated_are_flagged():
    for name in PAPER_ESTIMATES:
        peak = load_device_profile(name).peak_tflops["fp16"]
        assert peak.estimate and "estimate" in peak.source


def test_cpu_baseline_has_no_table_10_peak_and_its_computed_peak_is_an_estimate():
    profile = load_device_profile("intel-core-i7-11700")
    assert profile.peak_tflops and all(f.estimate for f in profile.peak_tflops.values())
    assert not any(f.source.startswith("XPU paper") for f in profile.peak_tflops.values())


def test_torch_device_follows_the_hardware_family():
    for profile in all_profiles():
        rules = profile.detect
        if rules.jetson_model or rules.cuda_name:
            assert profile.torch_device == "cuda", profile.name
        if rules.ascend_chip:
            assert profile.torch_device == "npu" and "npu-smi" in profile.sensors, profile.name
        if rules.openvino_device and not rules.cpu_model:
            assert profile.torch_device == "xpu", profile.name
        if rules.jetson_model:
            assert {"jetson-ina3221", "tegrastats"} <= set(profile.sensors) and profile.power_modes, profile.name
        if rules.cuda_name:
            assert "nvml" in profile.sensors, profile.name


def test_core_ultra_lists_its_three_openvino_engines():
    profile = load_device_profile("intel-core-ultra-7-155h")
    assert profile.kind == "xpu" and profile.torch_device == "cpu"
    engines = {e.kind: e.openvino_device for e in profile.engines.values()}
    assert engines == {"cpu": "CPU", "gpu": "GPU", "npu": "NPU"}
    assert all(e.peak_tflops for e in profile.engines.values())


@pytest.mark.parametrize(("rule", "value", "expected"), IDENTIFICATIONS)
def test_each_identification_string_selects_exactly_one_profile(rule, value, expected):
    assert matching(rule, value) == [expected]


@pytest.mark.parametrize(("rule", "value"), FOREIGN)
def test_other_skus_select_no_specific_profile(rule, value):
    assert matching(rule, value) == []


@pytest.mark.parametrize(("expected", "visible_gb"), AGX_ORIN_VISIBLE_GB.items())
def test_the_agx_orin_string_selects_the_module_by_the_memory_linux_sees(make_host, expected, visible_gb):
    assert sorted(matching("jetson_model", AGX_ORIN_STRING)) == sorted(AGX_ORIN_VISIBLE_GB)
    host = host_reporting(make_host, "jetson_model", AGX_ORIN_STRING, memory_gb=visible_gb)
    assert [p.name for p in all_profiles() if profile_present(p, host) and not is_generic(p)] == [expected]
    assert "memory Linux sees" in load_device_profile(expected).notes


def test_every_specific_profile_is_reachable_by_some_identification_string():
    reachable = {expected for _, _, expected in IDENTIFICATIONS} | set(AGX_ORIN_VISIBLE_GB)
    assert reachable == {p.name for p in all_profiles() if not is_generic(p)}


@pytest.mark.parametrize(("rule", "value", "expected"), IDENTIFICATIONS)
def test_profile_present_detects_the_device_on_a_host_reporting_it(make_host, rule, value, expected):
    host = host_reporting(make_host, rule, value)
    present = {p.name for p in all_profiles() if profile_present(p, host) and not is_generic(p)}
    assert present == {expected}


def test_a_plain_host_matches_only_its_generic_profile(make_host):
    x86 = make_host(arch="x86_64", cpu_model="AMD EPYC 7B13")
    assert [p.name for p in all_profiles() if profile_present(p, x86)] == ["generic-x86-cpu"]
    arm = make_host(arch="aarch64", cpu_model="Neoverse-N1")
    assert [p.name for p in all_profiles() if profile_present(p, arm)] == ["generic-arm-cpu"]
