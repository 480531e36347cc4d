"""What DP-Cache calibration and open-loop fidelity compare: a candidate's action chunks against the exact path's.

The exact path is always the fp32 eager torch replica (TF32 off) with the chosen weights, on the chosen device. The
candidate is the same replica (the default, ``--backend torch`` at fp32: the schedule or optimization is the only
difference) or a backend's ``PreparedPolicy`` (any other backend or precision: its runtime error counts too). A
backend policy is called one observation at a time (exported graphs have static batch-1 shapes), and the exact path
then runs one observation at a time as well, as ``vlabench run``'s correctness reference does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from vlabench.errors import InputError
from vlabench.measure.action_loops import ActionLoop, make_action_loop
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.policy import PreparedPolicy
from vlabench.models.replicas import Observation
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload

DENOISING_LOOPS = ("euler", "ddpm", "ddim")
LOOP_KINDS = {
    "single_pass": "one call predicts the whole chunk",
    "greedy_decode": "greedy decoding of action tokens, one call per token",
}


def require_denoising_loop(spec: ModelSpec, what: str) -> None:
    """InputError unless ``spec``'s action head is a denoising loop (Euler flow matching, DDPM or DDIM)."""
    kind = spec.action_loop
    if kind not in DENOISING_LOOPS:
        raise InputError(
            f"{what} needs a denoising loop (Euler flow matching, DDPM or DDIM); {spec.name}'s action head runs "
            f"{kind} ({LOOP_KINDS.get(kind, 'no denoising steps')}): there are no steps to skip or overlap"
        )


LoopFactory = Callable[[DPCacheSchedule | None, int], ActionLoop]


def model_loop(spec: ModelSpec, workload: Workload, device: torch.device) -> LoopFactory:
    """The action loop ``vlabench run`` builds for ``spec``, at a given batch; with a schedule, what ``--dp-cache``
    executes (a skipped step reuses the latest velocity, or predicted noise for DDPM/DDIM)."""

    def loop(schedule: DPCacheSchedule | None, batch: int) -> ActionLoop:
        return make_action_loop(spec, workload.model_copy(update={"batch": batch}), device, schedule)

    return loop


@contextmanager
def exact_arithmetic(device: torch.device) -> Iterator[None]:
    """fp32 without TF32 on CUDA (as the correctness gate's reference), inference mode."""
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=False), torch.inference_mode():
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32


@dataclass(frozen=True)
class Candidate:
    """A backend's prepared policy (batch 1) whose action chunks are compared with the exact path's."""

    description: str  # e.g. "onnxruntime fp32 on cpu"
    policy: PreparedPolicy
    dtype: torch.dtype
    fused: Callable[[], PreparedPolicy] | None = None  # the same backend with --fuse-expert-kv, where it applies

    def observation(self, obs: Observation) -> Observation:
        """``obs`` (fp32) at the candidate's precision."""
        return replace(obs, images=obs.images.to(self.dtype), state=obs.state.to(self.dtype))


EXACT = "fp32 eager torch"
