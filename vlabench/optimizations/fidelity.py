"""Open-loop fidelity: how far an optimized action chunk is from the exact path's on the same inputs and noise."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from vlabench.measure.dp_cache import DPCacheSchedule, parse_schedule
from vlabench.models.specs import ModelSpec
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.optimizations.candidates import Candidate, exact_arithmetic, model_loop, require_denoising_loop


class ActionError(BaseModel):
    """Errors of a chunk against the exact chunk; ``relative`` is over the exact denoised displacement."""

    model_config = ConfigDict(ser_json_inf_nan="strings")  # NaN actions give NaN errors: kept, not nulled

    max_abs: float
    rmse: float
    cosine: float = Field(description="cosine similarity of the two chunks")
    relative: float = Field(description="max |error| / max |exact actions - noise|")
    samples: int = 1


def action_error(actions: Tensor, exact: Tensor, noise: Tensor) -> ActionError:
    """Errors over a batch of chunks (each row one observation); the worst row for max and relative errors."""
    actions, exact, noise = actions.float().cpu(), exact.float().cpu(), noise.float().cpu()
    difference = actions - exact
    scale = (exact - noise).abs().flatten(1).amax(1).clamp_min(1e-12)
    cosine = F.cosine_similarity(actions.flatten(1), exact.flatten(1), dim=1)
    return ActionError(
        max_abs=float(difference.abs().max()),
        rmse=float(difference.pow(2).mean().sqrt()),
        cosine=float(cosine.mean()),
        relative=float((difference.abs().flatten(1).amax(1) / scale).max()),
        samples=int(actions.shape[0]),
    )


class FidelityVariant(BaseModel):
    """One action-expert optimization (or a combination) to compare with the exact path."""

    name: str
    dp_cache: DPCacheSchedule | None = None
    stale_steps: int = 0
    fuse_expert_kv: bool = False


RMUSCLE = (0, 1, 2, 6, 8, 9)  # rMuscle's DP-Cache set of computed steps, for 10-step loops


def default_variants(steps: int) -> list[FidelityVariant]:
    """Exact; lossless fusion; the paper's settings: rMuscle's DP-Cache set (at other step counts, the same fractions
    of the loop), a stable middle segment, V-AEFusion s ∈ {0,3,5,7,9} (capped at ``steps``), and DP-Cache combined
    with V-AEFusion s = 5. Loops of 3 to 9 steps (GR00T's 4) get one middle segment of every other step."""
    variants = [FidelityVariant(name="exact"), FidelityVariant(name="fuse-expert-kv (lossless)", fuse_expert_kv=True)]
    rmuscle = None
    if steps >= 10:
        computed = sorted({round(step * steps / 10) for step in RMUSCLE})
        rmuscle = parse_schedule("{" + ",".join(map(str, computed)) + "}", steps)
        segment = parse_schedule(f"segment:2-{steps - 2}/3", steps)
        variants += [
            FidelityVariant(name=f"dp-cache {rmuscle.label()}", dp_cache=rmuscle),
            FidelityVariant(name=f"dp-cache {segment.label()}", dp_cache=segment),
        ]
    elif steps >= 3:
        segment = parse_schedule(f"segment:1-{steps - 2}/2", steps)
        variants.append(FidelityVariant(name=f"dp-cache {segment.label()}", dp_cache=segment))
    for stale in sorted({min(s, steps) for s in (0, 3, 5, 7, 9)}):
        variants.append(FidelityVariant(name=f"v-aefusion s={stale}", stale_steps=stale))
    if rmuscle is not None:
        label = "{" + ",".join(map(str, rmuscle.computed)) + "}"
        variants.append(FidelityVariant(name=f"dp-cache {label} + v-aefusion s=5", dp_cache=rmuscle, stale_steps=5))
    return variants


def drifting_observations(spec: ModelSpec, workload: Workload, count: int, seed: int, device: torch.device):
    """A control-loop-like sequence: each observation is the previous one moved 10% towards a fresh seeded one
    (images and state), with the same instruction, so a stale prefix is stale by one cycle of drift."""
    first = synthetic_observation(spec, workload, seed, torch.float32, device)
    sequence = [first]
    for index in range(1, count):
        fresh = synthetic_observation(spec, workload, seed + index, torch.float32, device)
        previous = sequence[-1]
        sequence.append(
            replace(
                previous,
                images=previous.images * (1 - DRIFT) + fresh.images * DRIFT,
                state=previous.state * (1 - DRIFT) + fresh.state * DRIFT,
            )
        )
    return sequence


DRIFT = 0.1


def open_loop(
    spec: ModelSpec,
    workload: Workload,
    observations: int,
    variants: list[FidelityVariant],
    seed: int,
    device: torch.device,
    candidate: Candidate | None = None,
) -> list[tuple[FidelityVariant, ActionError]]:
    """Every variant against the exact path (fp32 eager torch, the model's own action loop) on ``observations``
    cycles of a drifting sequence: same weights, observations and noise; V-AEFusion's stale prefix is the previous
    cycle's. The variants run on the same replica (batched), or through ``candidate`` one observation at a time."""
    from vlabench.kernels.expert_fusion import ExpertKVHoister
    from vlabench.models.replicas import build_replica
    from vlabench.optimizations.fusion import FusionLoop

    require_denoising_loop(spec, "open-loop fidelity")
    model = build_replica(spec, seed, torch.float32, device)
    sequence = drifting_observations(spec, workload, observations + 1, seed, device)
    noises = [initial_noise(workload, seed + i, torch.float32, device) for i in range(observations)]
    noise = torch.cat(noises)
    loop_of = model_loop(spec, workload, device)
    with exact_arithmetic(device):
        caches = [model.prefix(obs) for obs in sequence]
        if candidate is None:
            cache_type = type(caches[0])
            current, previous = cache_type.concat(caches[1:]), cache_type.concat(caches[:-1])
            exact = loop_of(None, observations).sample(model, current, noise)
        else:
            exact = torch.cat([loop_of(None, 1).sample(model, caches[i + 1], n) for i, n in enumerate(noises)])
    results = []
    for variant in variants:
        if candidate is not None:
            actions = _candidate_cycles(candidate, variant, sequence, noises, loop_of(variant.dp_cache, 1), device)
            results.append((variant, action_error(actions, exact, noise)))
            continue
        with exact_arithmetic(device):
            hoist = ExpertKVHoister(model, workload.suffix_tokens) if variant.fuse_expert_kv else (lambda c: c)
            action_loop = loop_of(variant.dp_cache, observations)
            loop = FusionLoop(hoist, model, action_loop, lambda: None, variant.stale_steps, device, concurrent=False)
            loop.previous = hoist(previous)
            actions, _ = loop.cycle(current, noise)
        results.append((variant, action_error(actions, exact, noise)))
    return results


def _candidate_cycles(
    candidate: Candidate, variant: FidelityVariant, sequence: list, noises: list[Tensor], action_loop, device
) -> Tensor:
    """The variant's chunks through the candidate's policy, cycle by cycle as a control loop runs them (each cycle's
    prefix computed once, on the policy's own prefix lane; the previous one kept for V-AEFusion's stale steps)."""
    from vlabench.optimizations.fusion import FusionLoop

    if variant.fuse_expert_kv and candidate.fused is None:
        raise ValueError(f"{candidate.description} does not fuse the expert's prefix K/V")
    policy = candidate.fused() if variant.fuse_expert_kv and candidate.fused else candidate.policy
    lane = policy.prefix_lane()
    loop = FusionLoop(lane, policy, action_loop, policy.synchronize, variant.stale_steps, device, concurrent=False)
    chunks = []
    with torch.inference_mode():
        loop.previous = lane(candidate.observation(sequence[0]))
        for index, noise in enumerate(noises):
            actions, _ = loop.cycle(candidate.observation(sequence[index + 1]), noise.to(candidate.dtype))
            chunks.append(actions)
    loop.close()
    return torch.cat(chunks)
