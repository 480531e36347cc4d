"""The package layering of ARCHITECTURE.md: every import (module-level or inside a function) points down, never up,
and no module reaches itself through its imports."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.support.paths import ROOT

# Bottom to top; a module may import from its own layer and the layers below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("vlabench", "vlabench.errors", "vlabench.config", "vlabench.vocab", "vlabench.atomic", "vlabench.yaml_data"),
    ("vlabench.profiles",),
    ("vlabench.hardware",),
    ("vlabench.models",),
    ("vlabench.telemetry",),
    ("vlabench.kernels",),
    ("vlabench.measure",),
    ("vlabench.backends",),
    ("vlabench.analysis",),
    ("vlabench.optimizations",),
    ("vlabench.results",),
    ("vlabench.commands",),
    ("vlabench.fleet", "vlabench.serving"),
    ("vlabench.leaderboard_site",),
    ("vlabench.cli",),
    ("vlabench.__main__",),
)
ROOT_MODULES = {"__init__", "__main__", "config", "errors", "vocab", "atomic", "yaml_data"}
MAPPED_PACKAGES = (
    "vlabench",
    "vlabench.backends",
    "vlabench.kernels",
    "vlabench.leaderboard_site",
    "vlabench.profiles",
)


def module_files() -> dict[str, Path]:
    """Every vlabench module by dotted name, including the packages installed from top-level folders."""
    files: dict[str, Path] = {}
    for package in MAPPED_PACKAGES:
        root = Path(importlib.import_module(package).__path__[0])
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if package == "vlabench" and parts[0] in {"backends", "kernels", "leaderboard_site", "profiles"}:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join([package, *parts])] = path
    return files


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The vlabench modules ``name`` imports anywhere in its source (relative imports resolved)."""
    found: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            candidates = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(candidate for candidate in candidates if candidate in known and candidate != name)
    return found


def layer_of(name: str) -> int:
    best, depth = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = name == prefix or (name.startswith(prefix + ".") and prefix != "vlabench")
            if matches and prefix.count(".") > depth:
                best, depth = index, prefix.count(".")
    assert best is not None, f"{name} belongs to no layer: add its package to LAYERS and ARCHITECTURE.md"
    return best


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def test_only_the_shared_vocabulary_sits_directly_in_the_package():
    root = Path(importlib.import_module("vlabench").__path__[0])
    loose = {path.stem for path in root.glob("*.py")} - ROOT_MODULES
    assert not loose, f"modules directly in vlabench/ that belong in a subpackage: {sorted(loose)}"


def test_no_module_is_over_400_lines():
    long = {name: n for name, path in module_files().items() if (n := len(path.read_text().splitlines())) > 400}
    assert not long, f"split these modules: {long}"


def test_every_import_points_down(graph):
    upward = sorted(
        f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})"
        for name, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(name)
    )
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_there_are_no_import_cycles(graph):
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(sorted(cycle)) for cycle in cycles)


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm: the components with more than one module (each one a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_checks_catch_a_cycle_and_an_upward_import():
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [{"a", "b"}]
    assert layer_of("vlabench.cli.app") > layer_of("vlabench.measure.timing") > layer_of("vlabench.errors")


def test_every_package_folder_is_installed_and_every_import_is_a_declared_dependency():
    """A wheel holds only the packages pyproject lists: a new subpackage missing there works in an editable checkout
    and fails on a real install. The third-party packages vlabench imports are declared dependencies (or extras)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(project["tool"]["setuptools"]["packages"])
    folders = {
        "vlabench." + ".".join(path.parent.relative_to(ROOT / "vlabench").parts)
        for path in (ROOT / "vlabench").rglob("__init__.py")
        if path.parent != ROOT / "vlabench"
    }
    assert folders <= listed, sorted(folders - listed)
    declared = " ".join(project["project"]["dependencies"]).lower()
    for module, distribution in (("grpc", "grpcio"), ("PIL", "pillow"), ("tokenizers", "tokenizers")):
        imported = any(
            re.search(rf"^\s*(import|from) {module}\b", path.read_text(), re.M)
            for path in (ROOT / "vlabench").rglob("*.py")
        )
        assert not imported or distribution in declared, (module, distribution)
