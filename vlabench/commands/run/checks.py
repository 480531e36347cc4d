"""The run planner's checks on a request: a checkpoint's layout, the knobs a model family fixes, optimizations that
need a capable backend or model, the robots' memory and threads; and the caveats a plan warns of."""

from __future__ import annotations

from pathlib import Path

import psutil

from vlabench.backends import BACKENDS, Backend
from vlabench.config import RunConfig
from vlabench.errors import InputError, InsufficientMemoryError, UnavailableError
from vlabench.hardware.detection import cpu_has_native_bf16
from vlabench.hardware.devices import ResolvedDevice
from vlabench.hardware.isa_cap import CAPS, ENV, active_cap
from vlabench.measure.dp_cache import DPCacheSchedule
from vlabench.measure.serving import RobotsSettings
from vlabench.models.checkpoints import checkpoint_stamp
from vlabench.models.input_pipeline import CAMERA_FRAME
from vlabench.models.replicas import replica_class
from vlabench.models.specs import ActSpec, DiffusionPolicySpec, FlowVLASpec, ModelSpec, OpenVLASpec
from vlabench.models.workload import Workload

OBSERVATIONS_PER_ROBOT = 4
THREAD_BYTES = 256 << 10
"""A robot thread's committed stack and interpreter state (estimated; its 8 MiB stack is address space only)."""
MAX_ROBOT_THREADS = 4096
"""Robot threads one process starts at most (closed loop: one per robot)."""


def with_checkpoint(spec: ModelSpec, path: Path) -> ModelSpec:
    """``spec`` loading the lerobot weights at ``path``; the file must exist and the family must have a mapping."""
    if not hasattr(replica_class(spec), "LEROBOT_RENAMES"):
        raise InputError(f"--checkpoint loads lerobot weights; {spec.name} has no lerobot layout")
    return spec.model_copy(update={"checkpoint": checkpoint_stamp(path)})


def check_workload(spec: ModelSpec, workload: Workload) -> None:
    """Knobs a family's action head fixes: one call for single-pass heads, one token per action value for OpenVLA."""
    if isinstance(spec, ActSpec | DiffusionPolicySpec) and workload.chunk != spec.action.chunk:
        raise InputError(f"{spec.name}'s head is built for a {spec.action.chunk}-action chunk: --chunk cannot change")
    if isinstance(spec, DiffusionPolicySpec) and workload.cameras != spec.cameras:
        raise InputError(
            f"{spec.name}'s U-Net condition is built for {spec.cameras} camera(s): --cameras cannot change"
        )
    positions = getattr(getattr(spec, "dit", None), "max_positions", None)  # GR00T's DiT embeds each action
    if positions is not None and workload.chunk > positions:
        raise InputError(f"{spec.name}'s DiT has {positions} action positions: --chunk must be at most {positions}")
    if workload.action_loop == "single_pass" and workload.steps != 1:
        raise InputError(f"{spec.name} predicts its chunk in one pass: --steps must be 1")
    if isinstance(spec, OpenVLASpec) and not spec.parallel:
        tokens = workload.chunk * workload.action_dim
        if workload.steps + 1 != tokens:
            raise InputError(f"{spec.name} decodes {tokens} action tokens: --steps (decode calls) must be {tokens - 1}")


def check_optimizations(config: RunConfig, backend: Backend, schedule: DPCacheSchedule | None, spec: ModelSpec) -> None:
    if config.fuse_expert_kv and not backend.fuses_expert_kv:
        fusing = ", ".join(name for name, cls in BACKENDS.items() if cls.fuses_expert_kv)
        noun = "backends" if "," in fusing else "backend"
        raise InputError(f"--fuse-expert-kv applies to the {fusing} {noun}, not '{backend.name}'")
    if config.fuse_expert_kv and not isinstance(spec, FlowVLASpec):
        raise InputError(f"--fuse-expert-kv applies to the flow-matching VLAs (smolvla, pi0, pi05), not {spec.name}")
    if schedule is not None and spec.action_loop not in ("euler", "ddpm", "ddim"):
        raise InputError(f"--dp-cache needs a denoising loop; {spec.name}'s action head runs {spec.action_loop}")
    if schedule is not None and config.fuse_denoise_loop:
        raise InputError("--dp-cache and --fuse-denoise-loop cannot be combined: the captured loop runs every step")


def plan_caveats(device: ResolvedDevice, precision: str) -> tuple[str, ...]:
    """Known traps worth a warning before hours are spent."""
    caveats = []
    cap = active_cap()
    if cap and device.torch_device.type == "cpu":
        caveats.append(
            f"{ENV}={cap}: emulating {CAPS[cap].stands_for} on this CPU (features above the cap hidden; the "
            "runtimes' own caps apply only where set before the run, see provenance.isa_caps)"
        )
    if device.torch_device.type == "cpu" and precision == "bf16" and not cpu_has_native_bf16():
        caveats.append(
            "this CPU has no native bf16 (no avx512_bf16 or amx_bf16): bf16 matrix products are emulated and far "
            "slower than fp32 (compare with `vlabench devices --measure --precision fp32 --precision bf16`)"
        )
    return tuple(caveats)


def robots_wanted(config: RunConfig) -> int:
    """The most robots a run serves at once: ``--robots``, or ``--max-robots`` for the capacity search."""
    return config.max_robots if config.robots == "auto" else config.robots or 1


def check_robots_fit(workload: Workload, config: RunConfig, resident_bytes: int = 0) -> None:
    """Before any timing: the robots' observations and threads (and ``resident_bytes``, a model in the same host
    memory) must fit in the host's available memory, and their threads in what one process may start."""
    robots = robots_wanted(config)
    settings = RobotsSettings(robots, 1, 0.0, 1.0, 1.0, arrivals=config.arrivals)
    views, (height, width) = workload.cameras * workload.frames, CAMERA_FRAME
    observation = views * height * width * 3 + workload.frames * workload.state_dim * 4
    needed = robots * OBSERVATIONS_PER_ROBOT * observation + settings.threads * THREAD_BYTES + resident_bytes
    available = psutil.virtual_memory().available
    flag = "--max-robots" if config.robots == "auto" else "--robots"
    if needed > available:
        model = f" and the model's {resident_bytes / 2**30:.1f} GiB" if resident_bytes else ""
        raise InsufficientMemoryError(
            f"{flag} {robots} needs about {needed / 2**30:.1f} GiB of host memory ({robots} robots x "
            f"{OBSERVATIONS_PER_ROBOT} observations of {observation / 1e6:.2f} MB, {settings.threads} threads{model}) "
            f"but only {available / 2**30:.1f} GiB is available; serve fewer robots, or robots on several hosts "
            "with `run --remote`"
        )
    if settings.threads > MAX_ROBOT_THREADS:
        raise UnavailableError(
            f"{flag} {robots} needs {settings.threads} robot threads; one process starts at most "
            f"{MAX_ROBOT_THREADS} (--arrivals poisson needs far fewer, or spread the robots over several `run "
            "--remote` processes)"
        )
