"""Check that every ``Requires-Dist`` of the wheels in a folder is met, for the target Python on Linux x86-64, by
another wheel in the folder or by a package the GPU machine's image already holds.

Usage: python check_wheels.py WHEEL_DIR [--python-version 3.12]; exit 1 when a requirement is unmet or two wheels
are of the same package (pip refuses to install both).
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

# Packages the GPU machine's image holds (its documented package list), the ones that
# the wheels here may lean on; versions there are unknown, so a wheel whose need is met only here is reported.
TARGET_HAS = {
    canonicalize_name(name)
    for name in (
        "click",
        "colorama",
        "jinja2",
        "markdown-it-py",
        "markupsafe",
        "mdurl",
        "narwhals",
        "numpy",
        "nvidia-ml-py",
        "packaging",
        "pandas",
        "psutil",
        "pygments",
        "python-dateutil",
        "pyyaml",
        "rich",
        "safetensors",
        "setuptools",
        "shellingham",
        "six",
        "torch",
        "triton",
        "typer",
        "typing-extensions",
        "typing-inspect",
        "wheel",
    )
}


def target_environment(python_version: str) -> dict[str, str]:
    env = default_environment()
    env.update(
        python_version=python_version,
        python_full_version=f"{python_version}.0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
    )
    return env


def wheel_requirements(path: Path) -> list[Requirement]:
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode())
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def check(folder: Path, python_version: str) -> list[str]:
    env = target_environment(python_version)
    wheels = sorted(folder.glob("*.whl"))
    shipped: dict[str, str] = {}
    problems = []
    for wheel in wheels:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if name in shipped:
            problems.append(f"two wheels of {name}: {shipped[name]} and {version}")
        shipped[name] = str(version)
    for wheel in wheels:
        for requirement in wheel_requirements(wheel):
            if requirement.marker is not None and not requirement.marker.evaluate({**env, "extra": ""}):
                continue
            need = canonicalize_name(requirement.name)
            if need in shipped:
                if requirement.specifier and not requirement.specifier.contains(shipped[need], prereleases=True):
                    problems.append(f"{wheel.name} needs {requirement}, the wheel here is {need} {shipped[need]}")
            elif need in TARGET_HAS:
                print(f"note: {wheel.name} needs {requirement}: taken from the target image (version unchecked)")
            else:
                problems.append(f"{wheel.name} needs {requirement}: no wheel here and the target image lacks it")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--python-version", default="3.12")
    args = parser.parse_args(argv)
    problems = check(args.folder, args.python_version)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    print(f"requirements: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
