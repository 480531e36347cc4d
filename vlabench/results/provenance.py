"""Where a result came from: software versions, source revision, host, command line."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pydantic import BaseModel, Field

import vlabench
from vlabench.backends import BACKENDS
from vlabench.hardware.detection import HostInfo
from vlabench.hardware.isa_cap import recorded_caps

CORE_LIBRARIES = ("torch", "numpy", "pydantic", "transformers")


class Provenance(BaseModel):
    vlabench_version: str
    git_revision: str | None
    git_dirty: bool | None
    python: str
    libraries: dict[str, str]
    os: str
    cpu_model: str
    cpu_cores_physical: int
    cpu_cores_logical: int
    memory_gb: float
    accelerators: list[str]
    torch_threads: int
    command_line: list[str]
    isa_caps: dict[str, str] = Field(
        default_factory=dict,
        description="CPU feature caps the run was under (VLABENCH_MAX_CPU_ISA and the runtimes' own): an emulated "
        "lesser CPU class on cpu_model",
    )


def git_state(source: Path) -> tuple[str | None, bool | None]:
    """Revision and dirtiness of the checkout vlabench runs from; (None, None) for installed wheels."""
    try:
        revision = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return revision, bool(status.strip())


def library_versions() -> dict[str, str]:
    """The versions of the core libraries and of every registered backend's runtime library, as installed here."""
    found = {}
    for name in dict.fromkeys([*CORE_LIBRARIES, *(backend.runtime_library for backend in BACKENDS.values())]):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def collect_provenance(host: HostInfo, torch_threads: int, argv: list[str] | None = None) -> Provenance:
    revision, dirty = git_state(Path(vlabench.__file__).resolve().parent)
    return Provenance(
        vlabench_version=vlabench.__version__,
        git_revision=revision,
        git_dirty=dirty,
        python=sys.version.split()[0],
        libraries=library_versions(),
        os=platform.platform(),
        cpu_model=host.cpu_model,
        cpu_cores_physical=host.physical_cores,
        cpu_cores_logical=host.logical_cores,
        memory_gb=round(host.memory_gb, 2),
        accelerators=[*host.cuda_devices, *([host.jetson_model] if host.jetson_model else [])],
        torch_threads=torch_threads,
        command_line=list(sys.argv if argv is None else argv),
        isa_caps=recorded_caps(),
    )
