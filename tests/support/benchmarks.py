"""The benchmark scripts (``benchmarks/``), loaded as modules for the tests that check their own logic."""

import importlib.util
import sys

from tests.support.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"


def load(name: str):
    """``benchmarks/<name>.py`` as a module (its folder on the path while it loads, for its own imports)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))
