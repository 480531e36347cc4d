"""The ``vlabench`` command line: a typer app split by command group, Rich rendering in ``views/``."""

from vlabench.cli.app import app

__all__ = ["app"]
