"""What one launch of runs produced, whichever launcher ran them (this process, a spawned child, a ``vlabench run``
subprocess, a Ray task): the results' JSON texts, or how the launch failed. Ray nodes send it back as JSON."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, Field, PrivateAttr

from vlabench import errors
from vlabench.errors import VlabenchError
from vlabench.results.schema import RunResult


class LaunchOutcome(BaseModel):
    """``ok``: every run's result (``invalid``: a result that failed the correctness gate, exit 5), ``failed``: the
    process died or raised; ``error`` names the vlabench error class when it raised one (an input error is not a
    crash, and the caller re-raises it as the same class)."""

    status: Literal["ok", "invalid", "failed"]
    result_texts: list[str] = Field(default_factory=list)
    reason: str | None = None
    error: str | None = Field(default=None, description="the vlabench error class the runs raised, if any")
    exit_code: int | None = None
    wall_s: float
    hostname: str
    node_id: str | None = None
    started_utc: AwareDatetime | None = Field(default=None, description="None: the run never started")

    _results: list[RunResult] | None = PrivateAttr(default=None)
    _raised: VlabenchError | None = PrivateAttr(default=None)

    def keep_results(self, results: list[RunResult]) -> None:
        """Results made in this process: returned as they are, not parsed back from their texts."""
        self._results = results

    def keep_raised(self, error: VlabenchError) -> None:
        """An error raised in this process: re-raised as it is (with its own attributes)."""
        self._raised = error

    def results(self) -> list[RunResult]:
        if self._results is not None:
            return self._results
        return [RunResult.model_validate_json(text) for text in self.result_texts]

    def raise_error(self) -> None:
        """Raise the vlabench error the runs raised (as its own class), if they raised one."""
        if self._raised is not None:
            raise self._raised
        if self.error is None:
            return
        error_class = getattr(errors, self.error, VlabenchError)
        if not (isinstance(error_class, type) and issubclass(error_class, VlabenchError)):
            error_class = VlabenchError
        raise error_class(self.reason or "")
