"""A quantized policy's actions against the fp32 eager reference on a tiny model, and the checks the quantized-runtime
tests share (``test_quantized_runtimes``, ``test_amx_int8``, ``test_fp8``)."""

import torch

from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.correctness import TOLERANCES, compare, reference_actions

CPU = torch.device("cpu")
TOKEN_MODELS = {"openvla-7b-tiny"}
MIN_COSINE = {"int8": 0.999, "int4": 0.95}


def run_against_reference(policy, name, tiny_inputs, precision):
    """The policy's action chunk, the gate's verdict at ``precision`` (when it has a tolerance) and, for token
    models, the share of action tokens equal to the reference's (equal bins are equal tokens)."""
    spec, workload, obs, noise = tiny_inputs(name)
    loop = make_action_loop(spec, workload, CPU, None)
    with torch.inference_mode():
        actions = loop.sample(policy, policy.prefix(obs), noise)
    reference = reference_actions(spec, workload, 0, obs, noise, CPU)
    agreement = float((actions == reference).float().mean()) if name in TOKEN_MODELS else None
    verdict = compare(actions, reference, noise, precision) if precision in TOLERANCES else None
    cosine = compare(actions, reference, noise, "fp32").displacement_cosine
    return actions, (verdict, cosine), agreement


def check(verdicts, agreement, name, precision):
    """The gate's tolerance when it has one for ``precision``; always a floor on the displacement cosine (tiny
    models measured: int8 ≥ 0.9994, int4 ≥ 0.966) and, at int8, every token of a token model."""
    verdict, cosine = verdicts
    if verdict is not None:
        assert verdict.passed, (name, precision, verdict)
    if name in TOKEN_MODELS:
        assert precision != "int8" or agreement == 1.0
    else:
        assert cosine >= MIN_COSINE[precision], (name, precision, cosine)
