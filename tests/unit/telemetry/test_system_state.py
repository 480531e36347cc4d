from vlabench.telemetry.system_state import parse_nvpmodel_query, read_cpu_governor, sample_system_state

# `nvpmodel -q` on a Jetson AGX Orin (JetPack 5.1) and an Orin Nano (JetPack 6.2, MAXN SUPER mode id 2)
NVPMODEL_AGX_ORIN = "NV Fan Mode:quiet\nNV Power Mode: MAXN\n0\n"
NVPMODEL_ORIN_NANO = "NV Power Mode: MAXN_SUPER\n2\n"


def write_governors(root, governors):
    for index, governor in enumerate(governors):
        folder = root / f"cpu{index}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_governor").write_text(governor + "\n")
    (root / "cpufreq").mkdir()  # sibling entries that are not cores must be ignored


def test_cpu_governor_from_a_cpufreq_tree(tmp_path):
    write_governors(tmp_path, ["performance"] * 4)
    assert read_cpu_governor(tmp_path) == "performance"


def test_mixed_governors_are_reported_with_counts(tmp_path):
    write_governors(tmp_path, ["schedutil", "schedutil", "performance"])
    assert read_cpu_governor(tmp_path) == "mixed: 2×schedutil, 1×performance"


def test_no_cpufreq_gives_none(tmp_path):
    assert read_cpu_governor(tmp_path) is None


def test_nvpmodel_power_mode():
    assert parse_nvpmodel_query(NVPMODEL_AGX_ORIN) == "MAXN"
    assert parse_nvpmodel_query(NVPMODEL_ORIN_NANO) == "MAXN_SUPER"
    assert parse_nvpmodel_query("nvpmodel: command failed") is None


def test_sample_on_this_cpu_host():
    state = sample_system_state("cpu", window_s=0.05)
    assert 0.0 <= state.background_cpu_percent <= 100.0
    assert state.gpu is None
