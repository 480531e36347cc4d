"""What the kernel tests share: the paths a kernel may take on this CPU, the CPUs they are emulated on, and the
families whose int8 run goes through vlabench's own kernels."""

import pytest


def runnable_params(reasons: dict[str, str | None]) -> list:
    """One pytest param per kernel path, skipped with its reason where the path cannot run on this CPU."""
    return [
        pytest.param(path, marks=pytest.mark.skipif(reason is not None, reason=f"the {path} path cannot run: {reason}"))
        for path, reason in reasons.items()
    ]


# /proc/cpuinfo flags of two CPUs without AMX (the x86 flags these tests read): an AMD EPYC Zen 4 (family 25, model
# 17; read on a machine of this project) and an AVX2-only CPU without VNNI.
ZEN4_FLAGS = {
    *("fpu", "sse", "sse2", "ssse3", "fma", "sse4_1", "sse4_2", "avx", "f16c", "avx2", "bmi1", "bmi2", "avx512f"),
    *("avx512dq", "avx512ifma", "avx512cd", "avx512bw", "avx512vl", "avx512_bf16", "avx512vbmi", "avx512_vbmi2"),
    *("gfni", "vaes", "vpclmulqdq", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq"),
}
AVX2_FLAGS = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}

FAMILIES = ["smolvla-tiny", "pi0-tiny", "gr00t-n1.5-tiny", "act-tiny", "diffusion-policy-tiny", "openvla-7b-tiny"]
