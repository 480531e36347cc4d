"""``vlabench loop``: a robot control loop over a sequence of observations, exact vs V-AEFusion, interleaved.

Both loops see the same observations and noise cycle by cycle; their first cycle (synchronous by definition) and
``warmup`` more are not counted. Reported per cycle: latency, the overlap obtained (from spans), action rate.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

import torch

from vlabench.atomic import atomic_write_text
from vlabench.commands.run import plan_run, prepare_contender
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.hardware.detection import detect_host
from vlabench.measure.stats import summarize
from vlabench.models.workload import initial_noise, synthetic_observation
from vlabench.optimizations.fusion import PAPER_COLLAPSE_AT, FusionLoop
from vlabench.results.loop_artifact import LoopResult, LoopVariant
from vlabench.results.provenance import collect_provenance
from vlabench.vocab import Precision


def run_loop(config: RunConfig, stale_steps: int, cycles: int, warmup: int, out_dir: Path) -> LoopResult:
    plan = plan_run(config.model_copy(update={"energy_meter": "none"}))
    if not 0 <= stale_steps <= plan.workload.steps:
        raise InputError(f"--fusion-stale-steps must be within 0..{plan.workload.steps}")
    started = datetime.now(timezone.utc)
    if config.threads:
        torch.set_num_threads(config.threads)
    target = plan.device.torch_device
    contender = prepare_contender(plan)  # both loops run its policy through its action loop (stateless between calls)
    policy = contender.policy
    dtype = Precision.dtype(plan.precision)
    loops = {
        name: FusionLoop(
            policy.prefix_lane(),
            policy,
            contender.loop,
            policy.synchronize,
            steps,
            target,
        )
        for name, steps in (("exact", 0), ("fused", stale_steps))
    }
    spans: dict[str, list] = {"exact": [], "fused": []}
    try:
        for cycle in range(1 + warmup + cycles):
            seed = config.seed + cycle
            obs = synthetic_observation(plan.spec, plan.workload, seed, dtype, target)
            noise = initial_noise(plan.workload, seed, dtype, target)
            for name, loop in loops.items():
                _, cycle_spans = loop.cycle(obs, noise)
                if cycle > warmup:
                    spans[name].append(cycle_spans)
    finally:
        for loop in loops.values():
            loop.close()
    variants = {
        name: _variant(spans[name], steps, plan.workload.actions_per_chunk)
        for name, steps in (("exact", 0), ("fused", stale_steps))
    }
    warnings = list(plan.caveats)
    if stale_steps >= PAPER_COLLAPSE_AT:
        warnings.append(
            f"{stale_steps} of {plan.workload.steps} steps on a stale prefix: the paper saw task success collapse "
            f"from {PAPER_COLLAPSE_AT} on; check `vlabench fidelity` before deploying"
        )
    result = LoopResult(
        run_id=uuid.uuid4().hex,
        started_utc=started,
        model=plan.spec.name,
        device=plan.device.profile.name,
        backend=plan.backend.name,
        backend_details=policy.details(),
        precision=plan.precision,
        workload=plan.workload,
        dp_cache=plan.schedule,
        fuse_expert_kv=config.fuse_expert_kv,
        concurrency="CUDA stream for the prefix" if target.type == "cuda" else "a worker thread for the prefix",
        cycles=cycles,
        exact=variants["exact"],
        fused=variants["fused"],
        speedup_p50=variants["exact"].cycle_ms.p50 / variants["fused"].cycle_ms.p50,
        warnings=warnings,
        provenance=collect_provenance(detect_host(), torch.get_num_threads()),
        finished_utc=datetime.now(timezone.utc),
    )
    atomic_write_text(out_dir / result.file_name(), result.model_dump_json(indent=2))
    return result


def _variant(spans: list, stale_steps: int, actions_per_chunk: int) -> LoopVariant:
    latencies = [s.latency_ms for s in spans]
    overlaps = [s.overlap_ms for s in spans]
    cycle = summarize(latencies)
    return LoopVariant(
        stale_steps=stale_steps,
        cycle_ms=cycle,
        overlap_ms=summarize(overlaps),
        action_hz_p50=actions_per_chunk * 1000.0 / cycle.p50,
        samples_ms=latencies,
    )
