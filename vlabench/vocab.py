"""The one home of phase and precision names.

``Phase``: the ordered phase names a run measures, their labels, and the per-step span names (``denoise_step[i]``)
with their parsing. ``Precision``: the precisions vlabench runs, their torch dtypes and element sizes, and the single
rule that picks the default precision.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Literal

import torch

from vlabench.errors import unknown_name

ModelPhase = Literal["vision", "prefill", "denoise_step"]


class Phase:
    """Phase names, in execution order. Phase 1 (the prefix) is vision + prefill; phase 2 (the action) is the loop."""

    VISION = "vision"
    PREFILL = "prefill"
    PREFIX = "prefix"
    DENOISE_STEP = "denoise_step"
    ACTION = "action"
    E2E = "e2e"
    E2E_UNSYNCED = "e2e_unsynced"

    MODEL: tuple[ModelPhase, ...] = ("vision", "prefill", "denoise_step")
    """The phases a model's operators belong to (FLOPs, bytes, roofline rows)."""
    SUMMARY = ("vision", "prefill", "denoise_step", "action", "e2e")
    """The phases every table, roofline and profile summary shows."""
    RECORDED = (
        "preprocess",
        "vision",
        "prefill",
        "prefix",
        "denoise_step",
        "action",
        "postprocess",
        "e2e",
        "e2e_unsynced",
    )
    """The phases a run result's timing holds (pre- and postprocessing when the input pipeline is timed)."""
    PIPELINE = ("preprocess", "postprocess")
    """The input pipeline's phases, around the model's inside end-to-end."""
    END_TO_END_PARTS = ("vision", "prefill", "action")
    """The phases whose sum is one inference."""

    LABELS: ClassVar[dict[str, str]] = {
        "preprocess": "preprocess (tokenize, resize, normalize)",
        "vision": "vision encoder",
        "prefill": "VLM prefill",
        "prefix": "prefix (vision + prefill)",
        "denoise_step": "denoise step (each)",
        "action": "action expert (all steps)",
        "postprocess": "postprocess (unnormalize actions)",
        "e2e": "end-to-end",
        "e2e_unsynced": "end-to-end, no inner sync",
    }

    @staticmethod
    def step_span(index: int) -> str:
        """The span name of one action-loop step."""
        return f"denoise_step[{index}]"

    @staticmethod
    def of_span(span: str) -> str:
        """The phase a span belongs to: every ``denoise_step[i]`` counts as ``denoise_step``."""
        return Phase.DENOISE_STEP if span.startswith("denoise_step[") else span


class Precision:
    """Numeric precisions: names, torch dtypes, bytes per weight element, and the default rule.

    ``fp32``/``bf16``/``fp16`` are float precisions (weights and activations in that dtype). ``int8``, ``fp8``
    (e4m3) and ``int4`` are quantized: weights stored in that many bits (and, where the runtime supports it,
    activations in int8 or fp8); a
    quantized run's inputs and outputs are ``QUANTIZED_ACTIVATIONS``, and each backend declares what its float parts
    run in (fp32, or bf16 where the CPU runs it natively: OpenVINO's default, torch's AMX int8 scheme).
    """

    DTYPES: ClassVar[dict[str, torch.dtype]] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    QUANTIZED: ClassVar[tuple[str, ...]] = ("int8", "fp8", "int4")
    NAMES: ClassVar[tuple[str, ...]] = ("fp32", "bf16", "fp16", "int8", "fp8", "int4")
    AUTO = "auto"
    """Not a precision: ``--precision auto`` asks the planner for the fastest native precision that passes the gate."""
    BYTES: ClassVar[dict[str, float]] = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "fp8": 1, "int4": 0.5}
    QUANTIZED_ACTIVATIONS: ClassVar[torch.dtype] = torch.float32
    """The dtype of a quantized run's inputs and outputs (and of its float parts unless the backend says otherwise)."""
    REFERENCE = "fp32"
    REDUCED = ("bf16", "fp16")
    """Reduced float precisions in order of preference (bf16 keeps fp32's range)."""

    @staticmethod
    def parse(name: str, allow_auto: bool = False) -> str:
        names = (*Precision.NAMES, Precision.AUTO) if allow_auto else Precision.NAMES
        if name not in names:
            raise unknown_name("precision", name, names)
        return name

    @staticmethod
    def is_quantized(name: str) -> bool:
        return name in Precision.QUANTIZED

    @staticmethod
    def dtype(name: str) -> torch.dtype:
        """The torch dtype of a run's inputs and outputs at ``name`` (and, for float precisions, of everything)."""
        return Precision.QUANTIZED_ACTIVATIONS if name in Precision.QUANTIZED else Precision.DTYPES[name]

    @staticmethod
    def default(on_cpu: bool, available: Iterable[str]) -> str:
        """The one default-precision rule: fp32 on CPUs; elsewhere the first reduced precision available, else fp32.

        ``available`` is what the target supports: a backend's precisions on a GPU, or a profile's quoted peaks.
        """
        if on_cpu:
            return Precision.REFERENCE
        offered = set(available)
        return next((p for p in Precision.REDUCED if p in offered), Precision.REFERENCE)
