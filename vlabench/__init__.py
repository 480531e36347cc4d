"""vlabench: phase-by-phase benchmarks of Vision-Language-Action policies across accelerators."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vlabench")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"
