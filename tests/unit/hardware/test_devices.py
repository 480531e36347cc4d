import pytest

from tests.support import paths
from vlabench.errors import InputError, UnavailableError
from vlabench.hardware.detection import parse_npu_smi_chips, read_cpu_model, read_jetson_model, read_l4t_release
from vlabench.hardware.devices import resolve_device

X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 167
model name\t: 11th Gen Intel(R) Core(TM) i7-11700 @ 2.50GHz
stepping\t: 1
flags\t\t: fpu vme sse sse2 avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_vnni
"""

# /proc/cpuinfo tail on a Raspberry Pi 5 (Raspberry Pi OS bookworm): Arm fields, then a "Model" line.
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd0b
CPU revision\t: 1

Revision\t: d04170
Serial\t\t: 2c1e5c1d8f3a4b7e
Model\t\t: Raspberry Pi 5 Model B Rev 1.0
"""


def test_cpu_model_read_from_recorded_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(X86_CPUINFO)
    assert read_cpu_model(path) == "11th Gen Intel(R) Core(TM) i7-11700 @ 2.50GHz"
    path.write_text(ARM_CPUINFO)
    assert read_cpu_model(path) == "Raspberry Pi 5 Model B Rev 1.0"


def test_cpu_flags_from_cpuinfo(tmp_path):
    from vlabench.hardware.detection import cpu_has_native_bf16, read_cpu_flags

    path = tmp_path / "cpuinfo"
    path.write_text(X86_CPUINFO)
    flags = read_cpu_flags(path)
    assert {"avx2", "avx512f", "avx512_vnni"} <= flags and "avx512_bf16" not in flags
    assert not cpu_has_native_bf16(path)
    path.write_text(X86_CPUINFO.replace("avx512_vnni", "avx512_vnni avx512_bf16"))
    assert cpu_has_native_bf16(path)
    path.write_text(ARM_CPUINFO)
    assert "asimd" in read_cpu_flags(path)
    assert read_cpu_flags(tmp_path / "absent") == set()


def test_jetson_model_read_from_device_tree(tmp_path):
    model = tmp_path / "model"
    model.write_bytes(b"NVIDIA Jetson AGX Orin Developer Kit\x00")
    assert read_jetson_model(model) == "NVIDIA Jetson AGX Orin Developer Kit"
    model.write_bytes(b"Raspberry Pi 5 Model B Rev 1.0\x00")
    assert read_jetson_model(model) is None
    assert read_jetson_model(tmp_path / "missing") is None


def test_auto_on_an_unknown_x86_cpu_uses_the_generic_profile(make_host):
    resolved = resolve_device("auto", make_host())
    assert resolved.profile.name == "generic-x86-cpu"
    assert resolved.torch_device.type == "cpu"
    assert "generic" in resolved.note


def test_auto_prefers_a_matching_gpu_and_cpu_alias_stays_on_cpu(make_host):
    gpu_host = make_host(cuda_devices=("NVIDIA H200",), torch_cuda=True)
    assert resolve_device("auto", gpu_host).profile.name == "h200"
    assert resolve_device("cuda", gpu_host).torch_device.type == "cuda"
    assert resolve_device("cpu", gpu_host).profile.kind == "cpu"


def test_unlisted_gpu_gets_a_generic_profile_from_detection(make_host):
    resolved = resolve_device("cuda", make_host(cuda_devices=("NVIDIA RTX A2000",), torch_cuda=True))
    assert resolved.profile.name == "generic-cuda-gpu"
    assert "A2000" in resolved.profile.display_name


def test_jetson_alias_resolves_to_the_module_on_a_jetson(make_host):
    def agx_orin(memory_gb: float):
        model = "NVIDIA Jetson AGX Orin Developer Kit"
        return make_host(
            arch="aarch64", jetson_model=model, cuda_devices=("Orin",), torch_cuda=True, memory_gb=memory_gb
        )

    assert resolve_device("jetson", agx_orin(62.8)).profile.name == "jetson-agx-orin-64gb"
    assert resolve_device("auto", agx_orin(62.8)).profile.name == "jetson-agx-orin-64gb"
    assert resolve_device("jetson", agx_orin(30.6)).profile.name == "jetson-agx-orin-32gb"


def test_jetson_alias_elsewhere_names_what_was_detected(make_host):
    with pytest.raises(UnavailableError, match=r"not a Jetson \(detected: AMD EPYC"):
        resolve_device("jetson", make_host())


def test_cuda_request_without_cuda_says_so(make_host):
    with pytest.raises(UnavailableError, match="no CUDA device"):
        resolve_device("cuda", make_host())


def test_profile_of_absent_hardware_is_refused(make_host):
    with pytest.raises(UnavailableError, match="not present on this host"):
        resolve_device("rtx-4090", make_host())


def test_unknown_device_suggests_the_closest_name(make_host):
    with pytest.raises(InputError, match="Did you mean 'rtx-4090'") as info:
        resolve_device("rtx4090", make_host())
    assert "jetson" in str(info.value) and "auto" in str(info.value)


DATA = paths.DATA / "detection"


@pytest.mark.parametrize("release", ["36.4.3", "35.4.1"])
def test_l4t_release_from_nv_tegra_release(tmp_path, release):
    """Recorded /etc/nv_tegra_release files from JetPack 6.2 (L4T 36.4.3) and JetPack 5.1.2 (L4T 35.4.1)."""
    assert read_l4t_release(DATA / f"nv_tegra_release_r{release}") == release
    assert read_l4t_release(tmp_path / "absent") is None


def test_ascend_chip_names_from_npu_smi():
    """`npu-smi info` on an Atlas 300I Duo (Ascend 310P3), abridged to the chip table."""
    assert parse_npu_smi_chips((DATA / "npu_smi_info_310p3.txt").read_text()) == ("310P3",)
    assert parse_npu_smi_chips("no devices") == ()


def test_openvino_detection_reports_this_cpu():
    openvino = pytest.importorskip("openvino", reason="OpenVINO is not installed")
    from vlabench.hardware.detection import openvino_device_names

    names = openvino_device_names()
    assert "CPU" in openvino.Core().available_devices
    assert len(names) == len(openvino.Core().available_devices) and all(names)


def test_gpus_that_torch_cannot_use_are_not_picked(make_host):
    """NVML sees the GPU but torch is a CPU build (or CUDA_VISIBLE_DEVICES hides it): stay on the CPU."""
    cpu_torch = make_host(cuda_devices=("NVIDIA H200",), torch_cuda=False)
    assert resolve_device("auto", cpu_torch).profile.kind == "cpu"
    with pytest.raises(UnavailableError, match="cannot use CUDA"):
        resolve_device("cuda", cpu_torch)
    with pytest.raises(UnavailableError, match="cannot use CUDA"):
        resolve_device("h200", cpu_torch)


def test_a_jetson_with_a_cpu_only_torch_says_how_to_fix_it(make_host):
    jetson = make_host(arch="aarch64", jetson_model="NVIDIA Jetson AGX Orin Developer Kit", torch_cuda=False)
    assert resolve_device("auto", jetson).profile.kind == "cpu"
    with pytest.raises(UnavailableError, match="NVIDIA's wheel for your JetPack"):
        resolve_device("jetson", jetson)
