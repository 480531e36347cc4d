"""What every command times, prepared one way: the plan's backend prepared (its cold-start stages timed, where it
executes checked against the profile's engine), its action loop with the plan's DP-Cache schedule, and the seeded
inputs every backend sees."""

from __future__ import annotations

from vlabench.backends import Backend
from vlabench.commands.run.plan import RunPlan
from vlabench.errors import UnavailableError
from vlabench.hardware.targets import mismatch
from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.cold_start import timed_preparation
from vlabench.measure.policy import PreparedPolicy
from vlabench.measure.timing import Contender, Pipelined
from vlabench.models.input_pipeline import InputPipeline, raw_observation
from vlabench.models.workload import initial_noise, synthetic_observation
from vlabench.vocab import Precision

INPUT_VARIANTS = 2


def prepare_contender(plan: RunPlan, policy: PreparedPolicy | None = None, backend: Backend | None = None) -> Contender:
    """What every command times: the plan's policy (``policy``, or else ``backend`` (default: the plan's) prepared
    for the plan, its cold-start stages timed, and refused unless the runtime reports executing where the profile
    says, so a mislabelled result is never written), its action loop with the plan's DP-Cache schedule, its seeded
    inputs and, when the input pipeline is timed, their raw forms. The one place a command prepares a backend."""
    target = plan.device.torch_device
    if policy is None:
        chosen = backend or plan.backend
        policy, preparation = timed_preparation(
            lambda: chosen.prepare(plan.spec, plan.workload, target, plan.precision, plan.config.seed)
        )
        policy.preparation = preparation
        problem = mismatch(plan.engine, policy.executed_on())
        if problem:
            raise UnavailableError(f"{plan.backend.name} on {plan.device.profile.name}: {problem}; refusing the run")
    return Contender(
        policy,
        make_action_loop(plan.spec, plan.workload, target, plan.schedule),
        seeded_inputs(plan, plan.precision),
        pipelined_inputs(plan) if plan.config.preprocess else (),
    )


def seeded_inputs(plan: RunPlan, precision: str) -> list[tuple]:
    """The same seeded observations and noise for every backend, at the given precision, on the target."""
    dtype = Precision.dtype(precision)
    target = plan.device.torch_device
    return [
        (
            synthetic_observation(plan.spec, plan.workload, plan.config.seed + i, dtype, target),
            initial_noise(plan.workload, plan.config.seed + i, dtype, target),
        )
        for i in range(INPUT_VARIANTS)
    ]


def pipelined_inputs(plan: RunPlan) -> list[Pipelined]:
    """Seeded raw observations (camera frames, an instruction, a state in robot units) and the model's input
    pipeline on the target, one per seeded input."""
    config, dtype = plan.config, Precision.dtype(plan.precision)
    pipeline = InputPipeline(plan.spec, plan.workload, config.seed, dtype, plan.device.torch_device)
    return [Pipelined(pipeline, raw_observation(plan.workload, config.seed + i)) for i in range(INPUT_VARIANTS)]
