"""Quantized torch replicas: int8, fp8 and int4 Linear layers through torchao and torch's own int4 kernels.

The replica is built module by module (``build_replica(transform=...)``): each Linear is filled with its seeded
fp32 weights and quantized at once, so the float model never exists whole (OpenVLA-7B: 30 GB at fp32) and peak
memory is the quantized model plus one float layer. Everything but the Linear layers (embeddings, norms,
convolutions, the LM head read as a matrix) stays float, as do activations between layers: fp32, except under
vlabench's int8 kernel on a CPU that runs bf16 natively (AVX512-BF16, which every AMX CPU has; the kernel reads
and writes bf16 itself): there the float parts run in bf16, as OpenVINO's CPU plugin runs them by default on such
CPUs, and the weights are quantized from their bf16 values. Either way the run's inputs and actions stay fp32
(``ComputeDtype``).

Schemes, per device type:

- CPU int8, four schemes (``--quant-scheme``), all weights int8 per-channel symmetric and activations int8
  per-token dynamic: ``amx``, vlabench's own kernel (``kernels/amx_int8.py``: quantize, AMX matmul and
  dequantize in one call; the default where the CPU has AMX-INT8 and the kernel builds), ``vnni``, the same kernel
  on AVX512-VNNI (the default on CPUs with VNNI but no AMX: AMD Zen 4 and 5, Intel Ice Lake, Cascade Lake),
  ``avx2``, the same kernel on AVX2 (the default on CPUs with neither: AMD Zen 2 and 3, Intel Haswell to Skylake
  client; its own library, built without AVX-512), and ``torchao``, ``Int8DynamicActivationInt8WeightConfig``
  (the matmul is ``torch._int_mm``; the default elsewhere). torchao's int8 weight-only path dequantizes on every
  call on CPU, which made a 4096×4096 matvec about 10× slower than fp32 here.
- CPU int4: weight-only, groups of 128 (or the largest of 64/32 dividing the input width): torchao's tinygemm
  group qparams (``groupwise_affine_quantize_tensor``) packed and multiplied by torch's int4 CPU kernels
  (``aten._convert_weight_to_int4pack_for_cpu`` / ``aten._weight_int4pack_mm_for_cpu``, the kernels torchao's
  former ``Int4CPULayout`` called). torchao 0.18's own int4 tensors have no CPU path in a CPU torch build
  (``Int4WeightOnlyConfig`` needs mslk or CUDA). Activations enter each int4 linear in bf16 (the kernel's fast
  path; fp32 is over 20× slower) and leave as fp32.
- CPU fp8: torchao ``Float8WeightOnlyConfig`` (e4m3 weights, one scale per output channel), dequantized to bf16
  in each linear. No CPU computes fp8, so this is emulated and slower than bf16 (``--precision auto`` never picks
  it); it previews on any host what fp8 weights do to a model's actions.
- CUDA int8: torchao ``Int8WeightOnlyConfig``; CUDA int4: torchao ``Int4WeightOnlyConfig`` (group 128, tinygemm
  ``tile_packed_to_4d``, bf16 activations inside each linear); CUDA fp8 (compute capability 8.9 and later: Ada,
  Hopper, Blackwell): torchao ``Float8DynamicActivationFloat8WeightConfig`` per row (e4m3 weights per output
  channel, activations per token, dynamic; ``torch._scaled_mm``; bf16 inside each linear, fp32 outside). Built and
  gated on CUDA; not exercised on CPU hosts.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import fields, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from vlabench.backends.torch.quant_layers import (
    CastLinear,
    Int4PackedLinear,
    fp8_takes,
    int4_group,
    quiet_torchao_import,
)
from vlabench.errors import UnavailableError
from vlabench.measure.cold_start import stage
from vlabench.models.replicas import build_replica
from vlabench.models.replicas.layers import Attention
from vlabench.models.specs import ModelSpec
from vlabench.vocab import Precision

KEEP_FLOAT = ("lm_head",)  # Linear layers whose weight the replica reads as a matrix
# CPU int8, for --quant-scheme; the default is the first that runs here
INT8_SCHEMES = ("amx", "vnni", "avx2", "torchao")
KERNEL_SCHEMES = {
    "amx": "vlabench AMX int8 kernel (weights int8 per-channel symmetric, activations int8 per-token dynamic, "
    "int32 accumulation on AMX tiles; float parts in bf16, short-query attention on vlabench's AMX bf16 kernel)",
    "vnni": "vlabench int8 kernel on AVX512-VNNI (weights int8 per-channel symmetric, activations int8 per-token "
    "dynamic, int32 accumulation with VPDPBUSD; float parts in {float_parts}; in bf16, short-query attention on "
    "vlabench's attention kernel with VDPBF16PS)",
    "avx2": "vlabench int8 kernel on AVX2 (weights 7-bit per-channel symmetric, activations int8 per-token dynamic, "
    "int32 accumulation with VPMADDUBSW on activation codes offset to u8, then VPMADDWD; float parts in "
    "{float_parts}; long unmasked attention (vision towers) in int8 on vlabench's AVX2 kernel: q 8-bit per token, k "
    "smoothed and 7-bit per key, probabilities u8, v 7-bit per channel)",
}
"""The int8 schemes on vlabench's own kernel (``kernels/amx_int8.py``), named by the path they take."""
SCHEMES = {
    ("cpu", "int8"): "torchao int8 dynamic activation + int8 weight (weights int8 per-channel symmetric, "
    "activations int8 per-token dynamic)",
    ("cpu", "int4"): "int4 weight-only, asymmetric groups of 128 (torchao tinygemm qparams, torch "
    "aten._weight_int4pack_mm_for_cpu kernel, bf16 activations inside each linear)",
    ("cuda", "int8"): "torchao int8 weight-only (per-channel)",
    ("cuda", "int4"): "torchao int4 weight-only, group 128 (tinygemm tile_packed_to_4d, bf16 activations inside "
    "each linear)",
    ("cpu", "fp8"): "torchao fp8 weight-only (e4m3 per output channel, dequantized to bf16 in each linear; emulated: "
    "no CPU computes fp8)",
    ("cuda", "fp8"): "torchao fp8 dynamic activation + fp8 weight (e4m3, per-token activation and per-channel weight "
    "scales, torch._scaled_mm; bf16 activations inside each linear)",
}
FP8_CAPABILITY = (8, 9)  # CUDA compute capability of fp8 tensor cores (Ada; Hopper is 9.0)


def torchao_missing() -> str | None:
    """None when torchao is importable, else how to get it."""
    if importlib.util.find_spec("torchao") is None:
        return "quantized torch runs need torchao: pip install torchao"
    return None


def quantized_precisions(device: torch.device) -> tuple[str, ...]:
    """The quantized precisions the torch backend runs on ``device`` here (CUDA int4: compute capability ≥ 8.0, fp8:
    ≥ 8.9; CPU int8 without torchao through vlabench's int8 kernel where one of its paths runs)."""
    if device.type == "cpu" and torchao_missing():
        from vlabench.kernels import amx_int8

        return ("int8",) if amx_int8.runnable_path() is not None else ()
    if torchao_missing() or device.type not in ("cpu", "cuda"):
        return ()
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return ()
        return cuda_quantized_precisions(torch.cuda.get_device_capability(device))
    return ("int8", "fp8", "int4")


def cuda_quantized_precisions(capability: tuple[int, int]) -> tuple[str, ...]:
    """The quantized precisions torchao runs on a CUDA GPU of this compute capability."""
    return (
        "int8",
        *(("fp8",) if capability >= FP8_CAPABILITY else ()),
        *(("int4",) if capability >= (8, 0) else ()),
    )


def scheme(device: torch.device, precision: str, int8_scheme: str | None = None) -> str:
    """What ``precision`` means on ``device`` (CPU int8: under ``int8_scheme``, torchao's when None)."""
    if precision == "int8" and int8_scheme in KERNEL_SCHEMES:
        from vlabench.kernels import amx_int8

        float_parts = next(n for n, d in Precision.DTYPES.items() if d == amx_int8.float_dtype(int8_scheme))
        return KERNEL_SCHEMES[int8_scheme].format(float_parts=float_parts)
    return SCHEMES[(device.type, precision)]


def choose_int8_scheme(device: torch.device, requested: str | None) -> tuple[str | None, dict[str, str]]:
    """(the CPU int8 scheme to use, why each kernel scheme ahead of it in ``INT8_SCHEMES`` was passed over).
    A requested kernel scheme that cannot run here raises UnavailableError with the reason; not CPU: (None, {})."""
    from vlabench.kernels import amx_int8

    if device.type != "cpu":
        if requested is not None:
            raise UnavailableError(f"--quant-scheme {requested} is a CPU int8 scheme; this run is on {device.type}")
        return None, {}
    if requested == "torchao":
        return "torchao", {}
    passed_over: dict[str, str] = {}
    for name in KERNEL_SCHEMES if requested is None else (requested,):
        reason = amx_int8.unavailable_reason(name)
        if reason is None:
            return name, passed_over
        if requested is not None:
            raise UnavailableError(reason)
        passed_over[name] = reason
    return "torchao", passed_over


class Quantizer:
    """The ``build_replica`` transform for one (device, precision): quantizes each eligible Linear, counts them."""

    def __init__(self, device: torch.device, precision: str, int8_scheme: str | None = None) -> None:
        if (device.type, precision) not in SCHEMES:
            raise UnavailableError(f"the torch backend has no {precision} scheme on {device.type}")
        self.int8_scheme, self.passed_over = (
            choose_int8_scheme(device, int8_scheme) if precision == "int8" else (None, {})
        )
        self.on_kernel = self.int8_scheme in KERNEL_SCHEMES
        missing = torchao_missing()
        if missing and not self.on_kernel:
            raise UnavailableError(missing)
        self.device, self.precision = device, precision
        self.attention_unit = self._attention_unit()  # the attention kernel's path under the scheme, if any
        self.quantized: dict[str, int] = {}  # layer -> weights quantized
        self.kept: dict[str, int] = {}  # Linear layers left in fp32 (shape or role), with their weights
        self.groups: set[int] = set()
        self.attention_kernels = 0  # attention modules on the bf16 attention kernel (its ``attention_unit`` path)
        self.gated_mlps = 0  # gated MLPs whose gate and up projections run as one int8 kernel call
        self.fused_activations = 0  # MLPs whose first projection takes their activation in the kernel's epilogue
        self.fused_qkv = 0  # attention blocks whose q, k and v projections run as one int8 kernel call

    def _attention_unit(self) -> str | None:
        """AMX tiles under the AMX scheme; VDPBF16PS under the VNNI one where the float parts are bf16; the int8
        attention (``kernels/int8_attention.py``) under the AVX2 one; else none."""
        if self.int8_scheme in ("amx", "avx2"):
            return self.int8_scheme
        if self.int8_scheme == "vnni" and self.activation_dtype == torch.bfloat16:
            return "avx512"
        return None

    @property
    def activation_dtype(self) -> torch.dtype:
        """The dtype of the replica's float parts and the activations between its layers."""
        if self.on_kernel:
            from vlabench.kernels import amx_int8

            return amx_int8.float_dtype(self.int8_scheme)
        return Precision.dtype(self.precision)

    def __call__(self, name: str, module: nn.Module) -> nn.Module | None:
        if isinstance(module, Attention) and self.attention_unit:
            from vlabench.kernels.attention_paths import MODULES

            self.attention_kernels += 1
            return MODULES[self.attention_unit]()
        if not isinstance(module, nn.Linear) or isinstance(module, NonDynamicallyQuantizableLinear):
            return None  # attention modules that read their projection's weight directly keep it
        group = int4_group(module, self.device.type) if self.precision == "int4" else None
        if self.precision == "int4":
            refused = group is None
        else:
            refused = self.precision == "fp8" and not fp8_takes(module, self.device.type)
        if name.rsplit(".", 1)[-1] in KEEP_FLOAT or refused:
            self.kept[name] = module.weight.numel()
            return None
        self.quantized[name] = module.weight.numel()
        if self.precision == "int4" and self.device.type == "cpu":
            self.groups.add(group)
            return Int4PackedLinear(module, group)
        if self.on_kernel:
            from vlabench.kernels.amx_int8 import Int8Linear

            return Int8Linear(module, isa=self.int8_scheme)
        return self._torchao(module, group)

    def _torchao(self, module: nn.Linear, group: int | None) -> nn.Module:
        quiet_torchao_import()
        from torchao.quantization import (
            Float8DynamicActivationFloat8WeightConfig,
            Float8WeightOnlyConfig,
            Int4WeightOnlyConfig,
            Int8DynamicActivationInt8WeightConfig,
            Int8WeightOnlyConfig,
            PerRow,
            quantize_,
        )

        if self.precision in ("int4", "fp8"):  # CUDA int4 (tinygemm) and fp8 take bf16 weights and activations
            if self.precision == "int4":
                self.groups.add(group)
                bf16_config = Int4WeightOnlyConfig(group_size=group, int4_packing_format="tile_packed_to_4d")
            elif self.device.type == "cpu":
                bf16_config = Float8WeightOnlyConfig()
            else:
                bf16_config = Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())
            inner = nn.Sequential(module.to(torch.bfloat16))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_(inner, bf16_config)
            return CastLinear(inner[0], torch.bfloat16)
        config = Int8DynamicActivationInt8WeightConfig() if self.device.type == "cpu" else Int8WeightOnlyConfig()
        holder = nn.Sequential(module)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_(holder, config)
        return holder[0]

    def details(self) -> dict[str, Any]:
        """What was quantized and how, for the run's backend details."""
        text = scheme(self.device, self.precision, self.int8_scheme)
        if self.precision == "int4" and self.groups != {128}:
            text = text.replace("groups of 128", f"groups of {'/'.join(str(g) for g in sorted(self.groups))}")
        total = sum(self.quantized.values()) + sum(self.kept.values())
        return {
            "quantization": text,
            "quantized_linears": len(self.quantized),
            "quantized_weight_share": round(sum(self.quantized.values()) / total, 4) if total else 0.0,
            "float_activations": next(n for n, d in Precision.DTYPES.items() if d == self.activation_dtype),
            "float_linears": sorted(self.kept),
            **({"quantization_scheme": self.int8_scheme} if self.int8_scheme else {}),
            **(
                {"kernel_attention_modules": self.attention_kernels, "attention_unit": self.attention_unit}
                if self.attention_unit
                else {}
            ),
            **(
                {
                    "kernel_gated_mlps": self.gated_mlps,
                    "kernel_fused_activations": self.fused_activations,
                    "kernel_fused_qkv": self.fused_qkv,
                }
                if self.on_kernel
                else {}
            ),
            **{f"{name}_kernel_unavailable": reason for name, reason in self.passed_over.items()},
        }


def build_quantized_replica(
    spec: ModelSpec, seed: int, precision: str, device: torch.device, int8_scheme: str | None = None
) -> tuple[nn.Module, Quantizer]:
    """The seeded replica with its Linear layers quantized as they are built (never whole at fp32); its inputs and
    outputs at the run's dtype for ``precision`` whatever its float parts run in."""
    quantizer = Quantizer(device, precision, int8_scheme)
    model = build_replica(spec, seed, quantizer.activation_dtype, device, transform=quantizer)
    if quantizer.on_kernel:
        from vlabench.kernels import amx_int8

        quantizer.gated_mlps = amx_int8.fuse_gated_mlps(model)
        quantizer.fused_activations = amx_int8.fuse_mlp_activations(model)
        quantizer.fused_qkv = amx_int8.fuse_shared_input_projections(model)
    compute, boundary = quantizer.activation_dtype, Precision.dtype(precision)
    return (model if compute == boundary else ComputeDtype(model, compute, boundary)), quantizer


class ComputeDtype(nn.Module):
    """A replica whose float parts run in another dtype than the run's inputs and actions: floating inputs are cast
    in, velocities cast back out; image tokens and caches stay inside in the replica's own dtype. The flow time
    ``t`` goes in as given: the replicas take its sine-cosine embedding in fp32 from it, and bf16 would already
    have moved t = 0.9 to 0.898 (``backends/openvino/ir.py`` pins that chain to f32 for the same reason). Every
    other attribute is the replica's."""

    def __init__(self, replica: nn.Module, compute: torch.dtype, boundary: torch.dtype) -> None:
        super().__init__()
        self.replica, self.compute, self.boundary = replica, compute, boundary

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["replica"], name)

    def _inside(self, value: Any) -> Any:
        """A floating tensor in the replica's dtype; an observation with its floating fields so; the rest as is."""
        if isinstance(value, Tensor):
            return value.to(self.compute) if value.is_floating_point() else value
        return replace(value, **{f.name: self._inside(getattr(value, f.name)) for f in fields(value)})

    def embed_images(self, images: Tensor) -> Tensor:
        return self.replica.embed_images(self._inside(images))

    def prefill(self, obs: Any, image_tokens: Tensor) -> Any:
        return self.replica.prefill(self._inside(obs), image_tokens)

    def prefix(self, obs: Any) -> Any:
        return self.prefill(obs, self.embed_images(obs.images))

    def denoise_step(self, x_t: Tensor, t: Tensor, cache: Any) -> Tensor:
        velocity = self.replica.denoise_step(self._inside(x_t), t, cache)  # t as given: see the class docstring
        return velocity.to(self.boundary)


def build_torch_replica(
    spec: ModelSpec, seed: int, precision: str, device: torch.device, int8_scheme: str | None = None
) -> tuple[nn.Module, dict[str, Any] | None]:
    """The torch backends' replica at any precision, with its quantization details (None for a float one)."""
    if not Precision.is_quantized(precision):
        with stage("load"):
            return build_replica(spec, seed, Precision.DTYPES[precision], device), None
    with stage("quantize"):  # the layers are quantized as they are built: loading is part of it
        model, quantizer = build_quantized_replica(spec, seed, precision, device, int8_scheme)
    return model, quantizer.details()
