"""``vlabench worker``: the Ray custom resources this host advertises, one per detected device profile."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess

from vlabench.errors import InputError, UnavailableError
from vlabench.fleet.sweep_file import PLACEMENT_PREFIX

LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def detected_device_names() -> list[str]:
    """Profiles present on this host (the generic CPU profile when none matches), most specific first, then the
    ``cpu`` alias, which every host can run."""
    from vlabench.hardware.detection import detect_host
    from vlabench.hardware.devices import _fallback_cpu_profile, detected_profiles

    host = detect_host()
    present = detected_profiles(host)
    cpus = [] if any(profile.kind == "cpu" for profile in present) else [_fallback_cpu_profile(host)]
    return [*(profile.name for profile in [*present, *cpus]), "cpu"]


def worker_resources(devices: list[str]) -> dict[str, int]:
    """One unit of ``vlabench-device:<name>`` per device: a device runs one benchmark at a time."""
    bad = [name for name in devices if not LABEL.match(name)]
    if bad:
        raise InputError(f"invalid placement label {', '.join(map(repr, bad))}: use letters, digits, '.', '_', '-'")
    return {PLACEMENT_PREFIX + name: 1 for name in dict.fromkeys(devices)}


def ray_start_command(resources: dict[str, int], address: str | None, port: int, num_cpus: int | None) -> list[str]:
    """``ray start`` joining ``address`` (or starting a head on ``port`` when None) with these resources."""
    command = ["ray", "start", *(["--address", address] if address else ["--head", "--port", str(port)])]
    if num_cpus is not None:
        command += ["--num-cpus", str(num_cpus)]
    return [*command, "--resources", json.dumps(resources, separators=(",", ":"))]


def start_ray(command: list[str]) -> int:
    if shutil.which("ray") is None:
        raise UnavailableError("the `ray` command is not installed: pip install -e '.[ray]'")
    return subprocess.call(command)


def shell_line(command: list[str]) -> str:
    return shlex.join(command)
