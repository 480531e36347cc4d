"""Capping the CPU features vlabench and the runtimes use, to measure a lesser x86 CPU class on a newer CPU.

``VLABENCH_MAX_CPU_ISA`` (a ``CAPS`` name) hides the features above the cap from vlabench's own decisions (which
int8 kernel path runs, which precisions count as native, the benchmarks' CPU class); each runtime has its own cap,
set from the same entry before it is imported (``runtime_environment``): ATen's vectorized kernels
(``ATEN_CPU_CAPABILITY``), oneDNN in torch and in OpenVINO's CPU plugin (``ONEDNN_MAX_CPU_ISA``), MKL
(``MKL_ENABLE_INSTRUCTIONS``) and Inductor's generated C++ (``TORCHINDUCTOR_CPP_MARCH``; it also reads ATen's).
ONNX Runtime's MLAS kernels have no such cap. An emulated class keeps the host's microarchitecture (caches, memory,
clocks, execution ports), so its figures are labelled emulated and never stand for a measurement on that class.
"""

from __future__ import annotations

import difflib
import os
import sys
from dataclasses import dataclass, field

from vlabench.errors import InputError

ENV = "VLABENCH_MAX_CPU_ISA"


@dataclass(frozen=True)
class IsaCap:
    """One CPU class to emulate: the flag prefixes hidden from vlabench, and each runtime's own cap."""

    stands_for: str
    hidden: tuple[str, ...]
    runtimes: dict[str, str] = field(default_factory=dict)


ABOVE_AVX2 = ("avx512", "amx", "avx_vnni", "avx_ifma", "avx_ne_convert", "avx10")
CAPS = {
    "avx2": IsaCap(
        "an x86-64-v3 CPU without AVX-512 or AVX-VNNI (AMD Zen 2 and 3, Intel Haswell to Skylake client)",
        ABOVE_AVX2,
        {
            "ATEN_CPU_CAPABILITY": "avx2",
            "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3",
        },
    ),
    "avx512_vnni": IsaCap(
        "an AVX512-VNNI CPU without native bf16 (Intel Cascade Lake)",
        ("avx512_bf16", "avx512_fp16", "amx", "avx_vnni", "avx_ifma", "avx_ne_convert", "avx10"),
        {
            "ATEN_CPU_CAPABILITY": "avx512",
            "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI",
            "MKL_ENABLE_INSTRUCTIONS": "AVX512",
            "TORCHINDUCTOR_CPP_MARCH": "cascadelake",
        },
    ),
}
"""The CPU classes that can be emulated, by name."""
RUNTIME_VARIABLES = tuple(dict.fromkeys(name for cap in CAPS.values() for name in cap.runtimes))


def cap_named(name: str) -> IsaCap:
    """The ``CAPS`` entry ``name``; anything else is an InputError listing the names and the closest."""
    if name not in CAPS:
        close = difflib.get_close_matches(name, CAPS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise InputError(f"{ENV}={name!r} is not a CPU class vlabench can emulate{hint}; valid: {', '.join(CAPS)}")
    return CAPS[name]


def active_cap() -> str | None:
    """The cap this process runs under (``VLABENCH_MAX_CPU_ISA``), checked; None without one."""
    name = os.environ.get(ENV, "").strip()
    if not name:
        return None
    cap_named(name)
    return name


def capped(flags: set[str]) -> set[str]:
    """``flags`` less the features above the active cap (all of them without one)."""
    name = active_cap()
    if name is None:
        return flags
    return {flag for flag in flags if not flag.startswith(CAPS[name].hidden)}


def runtime_environment(name: str) -> dict[str, str]:
    """The environment that runs a process under cap ``name``: vlabench's and every runtime's cap."""
    return {ENV: name, **cap_named(name).runtimes}


def recorded_caps() -> dict[str, str]:
    """The caps set in this process's environment (vlabench's and the runtimes'), for a result's provenance."""
    return {name: os.environ[name] for name in (ENV, *RUNTIME_VARIABLES) if os.environ.get(name)}


def run_capped(name: str | None) -> None:
    """Under cap ``name``, run this script again in a process whose environment caps vlabench and every runtime
    (``runtime_environment``; the runtimes read their caps once, when they load); nothing without one, or when this
    process already runs under it."""
    if name is None or active_cap() == name:
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **runtime_environment(name)})


def emulation_entry() -> dict[str, object]:
    """What a benchmark artifact's ``cpu`` entry adds under a cap: the class emulated and every cap set."""
    name = active_cap()
    return {"emulates": CAPS[name].stands_for, "isa_caps": recorded_caps()} if name else {}
