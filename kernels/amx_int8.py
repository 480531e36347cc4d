"""vlabench's own int8 linear on Intel AMX, AVX512-VNNI or AVX2, for the action expert's small-M GEMMs (issue 19).

Why it exists: at the expert's shapes (50 rows, K and N of 720–2048) oneDNN's int8 GEMM (``torch._int_mm``, the
kernel behind torchao's dynamic int8 on CPU) ran at a fraction of this CPU's measured int8 peak and streamed
weights at about a quarter of its read bandwidth (``benchmarks/expert_profile.py``; ``benchmarks/amx_linear.py``
measures both side by side). The kernel (``amx_int8.cpp``) quantizes the activations per row, multiplies on AMX
tiles against a weight packed once at load (``pack_weight``), and dequantizes in the same pass; the scheme is
torchao's dynamic int8 (weights per-channel symmetric, activations per-token symmetric). fp32 and bf16 activations
go in and come out as they are. The same packed weight runs through the kernel's other paths (``ISAS``), with the
same scheme, the same int32 sums and the same fp32 epilogue: on CPUs without AMX but with AVX512-VNNI (AMD Zen 4
and 5, Intel Ice Lake and Cascade Lake) a VNNI path, and on CPUs with only AVX2 (AMD Zen 2 and 3, Intel Haswell to
Skylake client) an AVX2 path (``avx2_int8.cpp``, fp32 activations, 7-bit weight codes: ``WEIGHT_QMAX``).

It is compiled on first use with torch's C++ extension builder (a C++ compiler and ninja; about a minute, then
cached by torch under ``TORCH_EXTENSIONS_DIR``) into two libraries (``EXTENSIONS``): the AMX and VNNI paths with the
AMX bf16 attention (``amx_attention.py``), and the AVX2 path alone, built without AVX-512 flags so that an AVX2-only
CPU can load it. Loading them registers the operators ``vlabench::{amx,vnni,avx2}_int8_linear``,
``vlabench::{amx,vnni,avx2}_int8_gated_linear`` and ``vlabench::{amx,avx512}_attention`` with torch's dispatcher
(eager calls go straight to C++; ``torch.compile`` keeps each as one opaque call). ``unavailable_reason(isa)`` says
why a path cannot run on a host.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import shutil
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

from vlabench.errors import UnavailableError
from vlabench.hardware.detection import read_cpu_flags
from vlabench.models.replicas import transform_modules
from vlabench.models.replicas.layers import GatedMLP, PointwiseMLP, SharedInputProjections

ISAS: dict[str, tuple[str, ...]] = {
    "amx": ("amx_tile", "amx_int8", "amx_bf16", "avx512f", "avx512bw", "avx512_bf16"),
    "vnni": ("avx512f", "avx512bw", "avx512_vnni"),
    "avx2": ("avx2", "fma"),
}
"""The kernel's paths, fastest first, with the CPU flags each needs (the VNNI path's bf16 activations also need
avx512_bf16; without it the float parts stay fp32, see ``float_dtype``)."""
ATTENTION_UNITS = ("amx", "avx512")  # the bf16 attention's paths (amx_attention.py): AMX tiles, or VDPBF16PS
EXTENSIONS: dict[str, tuple[tuple[str, ...], list[str]]] = {
    "avx512": (
        ("amx_int8.cpp", "amx_attention.cpp", "amx_tiles.h", "int8_call.h", "vector_math.h"),
        [
            "-O3",
            "-mamx-tile",
            "-mamx-int8",
            "-mamx-bf16",
            "-mavx512f",
            "-mavx512bw",
            "-mavx512vl",
            "-mavx512dq",
            "-mavx512bf16",
            "-mavx512vnni",
            "-fopenmp",
        ],
    ),
    "avx2": (
        ("avx2_int8.cpp", "avx2_attention.cpp", "avx2_int8.h", "int8_call.h"),
        ["-O3", "-mavx2", "-mfma", "-fopenmp"],
    ),
}
"""The two libraries the kernels are built into (sources, compiler flags): the AMX and AVX512 paths with the
attention, and the AVX2 path alone, built without AVX-512 so an AVX2-only CPU can load and run it."""
ISA_EXTENSION = {"amx": "avx512", "vnni": "avx512", "avx2": "avx2"}
TILE_N = 16  # output features are padded to whole 16-column tiles
TILE_K = 64  # input features are padded to whole 64-byte k blocks
WEIGHT_QMAX = {"amx": 127, "vnni": 127, "avx2": 63}
"""Per path, the weight codes' range [-q, q]: 8 bits, or 7 on AVX2, whose VPMADDUBSW sums u8 x s8 pairs into a
saturating int16 (the activation codes go in offset to u8, so 2 x 255 x 63 is the largest pair sum that stays
exact; OpenVINO and oneDNN quantize weights for AVX2 the same way)."""
ACTIVATION_CODES = {"silu": 0, "gelu_tanh": 1}  # an MLP's activation -> the kernel epilogue's activation code
NO_ACTIVATION = -1
KERNEL_DTYPES = {
    "amx": (torch.float32, torch.bfloat16),
    "vnni": (torch.float32, torch.bfloat16),
    "avx2": (torch.float32,),
}
"""Per path, the activation dtypes the kernel reads and writes as they are (others go through fp32)."""


def kernel_dtypes(isa: str) -> tuple[torch.dtype, ...]:
    """The activation dtypes the ``isa`` path takes as they are on this CPU: its ``KERNEL_DTYPES``, less bf16 where
    the CPU has no AVX512-BF16 (a VNNI CPU such as Ice Lake): bf16 rows then go through fp32 like any other dtype."""
    native_bf16 = "avx512_bf16" in read_cpu_flags()
    return tuple(dtype for dtype in KERNEL_DTYPES[isa] if dtype != torch.bfloat16 or native_bf16)


THIS_CPU_KERNEL_DTYPES = {isa: kernel_dtypes(isa) for isa in ISAS}
"""``kernel_dtypes`` of each path, read once on import: every layer of a forward pass asks (and torch.compile traces
a constant)."""


def unavailable_reason(isa: str = "amx") -> str | None:
    """None when the kernel's ``isa`` path (an ``ISAS`` name) can be built and run here, else why not (checked
    before any compiling)."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"the int8 kernel needs Linux on x86-64 (this is {sys.platform} {platform.machine()})"
    missing = [flag for flag in ISAS[isa] if flag not in read_cpu_flags()]
    if missing:
        needed = ", ".join(ISAS[isa])
        return f"the {isa.upper()} int8 kernel needs a CPU with {needed} (missing here: {', '.join(missing)})"
    if shutil.which("ninja") is None:
        return "the int8 kernel is compiled on first use and needs ninja (pip install ninja)"
    from torch.utils.cpp_extension import get_cxx_compiler

    if shutil.which(get_cxx_compiler()) is None:
        return f"the int8 kernel is compiled on first use and needs a C++ compiler ({get_cxx_compiler()} not found)"
    return None


def runnable_path() -> str | None:
    """The first of the kernel's paths (``ISAS``, fastest first) that runs here, or None."""
    return next((isa for isa in ISAS if unavailable_reason(isa) is None), None)


def float_dtype(isa: str = "amx") -> torch.dtype:
    """The dtype a model's float parts run in around the kernel's ``isa`` path: bf16 where the path reads and writes
    bf16 itself and the CPU has it natively (AVX512-BF16, which every AMX CPU has), else fp32."""
    return torch.bfloat16 if torch.bfloat16 in kernel_dtypes(isa) else torch.float32


@functools.cache
def extension(name: str = "avx512") -> str:
    """Builds (once per source version, then from torch's extension cache) and loads one of the ``EXTENSIONS``,
    registering its operators; returns the library's path."""
    isas = [isa for isa, built_in in ISA_EXTENSION.items() if built_in == name]
    reasons = [unavailable_reason(isa) for isa in isas]
    if all(reasons):
        raise UnavailableError(reasons[-1])
    from torch.utils.cpp_extension import load

    names, flags = EXTENSIONS[name]
    sources = [Path(__file__).with_name(source) for source in names]
    version = hashlib.sha256(b"".join(path.read_bytes() for path in sources) + " ".join(flags).encode()).hexdigest()
    try:
        library = load(
            f"vlabench_{name}_{version[:12]}",
            [str(path) for path in sources if path.suffix == ".cpp"],
            extra_cflags=flags,
            extra_ldflags=["-fopenmp"],
            is_python_module=False,
            verbose=False,
        )
    except (RuntimeError, OSError) as exc:  # compiler errors arrive as RuntimeError with the build log
        tail = "\n".join(str(exc).strip().splitlines()[-5:])
        raise UnavailableError(f"building the {name} int8 kernels failed:\n{tail}") from exc
    for isa in isas:
        torch.library.register_fake(f"vlabench::{isa}_int8_linear")(_output_like)
        torch.library.register_fake(f"vlabench::{isa}_int8_gated_linear")(_output_like)
    for unit in ATTENTION_UNITS if name == "avx512" else ():
        torch.library.register_fake(f"vlabench::{unit}_attention")(_attention_like)
    if name == "avx2":
        torch.library.register_fake("vlabench::avx2_int8_attention")(_heads_merged_like)
    return library


def _output_like(
    x: Tensor, packed: Tensor, w_scale: Tensor, bias: Tensor, out_features: int, activation: int
) -> Tensor:
    """What the int8 operators (``vlabench::{isa}_int8_linear``, ``{isa}_int8_gated_linear``) return, for tracing:
    [M, out_features] in x's dtype."""
    return x.new_empty((x.shape[0], out_features))


def _attention_like(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, scale: float) -> Tensor:
    """What ``vlabench::amx_attention`` and ``avx512_attention`` return: a contiguous tensor shaped like q."""
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _heads_merged_like(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """What ``vlabench::avx2_int8_attention`` returns: shaped like q [B, H, S, D], stored as [B, S, H, D]."""
    batch, heads, queries, size = q.shape
    return q.new_empty((batch, queries, heads, size)).transpose(1, 2)


def quantize_weight(weight: Tensor, qmax: int = 127) -> tuple[Tensor, Tensor]:
    """Per-output-channel symmetric int8: (codes [N, K] in [-qmax, qmax], scales [N]), scale = absmax / qmax (1 for
    a zero row)."""
    weight = weight.detach().float()
    absmax = weight.abs().amax(dim=1)
    scales = torch.where(absmax > 0, absmax / qmax, torch.ones_like(absmax))
    codes = torch.round(weight / scales[:, None]).clamp(-qmax, qmax).to(torch.int8)
    return codes, scales


def pack_weight(codes: Tensor) -> Tensor:
    """int8 codes [N, K] (N a multiple of 16) in the kernels' packed layout [N/16][ceil(K/64)][16][64]: per 16
    output columns, blocks of 64 k, each row 4 consecutive k of every column (K zero-padded)."""
    n, k = codes.shape
    k_blocks = -(-k // TILE_K)
    padded = torch.nn.functional.pad(codes, (0, k_blocks * TILE_K - k))
    blocked = padded.view(n // TILE_N, TILE_N, k_blocks, TILE_K // 4, 4).permute(0, 2, 3, 1, 4)
    return blocked.contiguous().view(n // TILE_N, k_blocks, TILE_K // 4, TILE_N * 4)


def _pad_rows(tensor: Tensor, rows: int) -> Tensor:
    return torch.cat([tensor, tensor.new_zeros((rows - tensor.shape[0], *tensor.shape[1:]))])


class Int8Linear(nn.Module):
    """A Linear whose weight is int8 in the kernel's packed layout, run on its ``isa`` path; any float in, the same
    dtype out (fp32 and bf16 go through the kernel as they are, other dtypes through fp32). ``activation`` (an
    ``ACTIVATION_CODES`` name, set by ``fuse_mlp_activations``) is applied in the kernel's epilogue, to the fp32
    result."""

    def __init__(self, linear: nn.Linear, isa: str = "amx") -> None:
        super().__init__()
        if isa not in ISAS:
            raise ValueError(f"no int8 kernel path '{isa}' (the paths are {', '.join(ISAS)})")
        self.isa = isa
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.activation: str | None = None
        codes, scales = quantize_weight(linear.weight, WEIGHT_QMAX[isa])
        padded = -(-self.out_features // TILE_N) * TILE_N
        bias = linear.bias.detach().float() if linear.bias is not None else scales.new_zeros(self.out_features)
        extension(ISA_EXTENSION[isa])
        self.register_buffer("packed", pack_weight(_pad_rows(codes, padded)))
        self.register_buffer("w_scale", _pad_rows(scales, padded))
        self.register_buffer("bias", _pad_rows(bias, padded))

    def forward(self, x: Tensor) -> Tensor:
        code = ACTIVATION_CODES[self.activation] if self.activation else NO_ACTIVATION
        return _on_kernel(self, x, self.out_features, code)

    def extra_repr(self) -> str:
        then = f", then {self.activation}" if self.activation else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 {self.isa.upper()}{then}"


def _on_kernel(module: nn.Module, x: Tensor, out_features: int, code: int, gated: bool = False) -> Tensor:
    """The int8 operator on ``module``'s path (its ``isa``; the gated call when ``gated``) on the rows of ``x`` with
    its packed weight, scales and bias: [..., in] -> [..., out_features] in x's dtype (fp32, and bf16 where the CPU
    has AVX512-BF16, go through the kernel as they are; others through fp32)."""
    operator = getattr(torch.ops.vlabench, f"{module.isa}_int8_{'gated_' if gated else ''}linear")
    flat = x.reshape(-1, module.in_features)
    flat = flat if flat.dtype in THIS_CPU_KERNEL_DTYPES[module.isa] else flat.float()
    out = operator(flat, module.packed, module.w_scale, module.bias, out_features, code)
    return out.to(x.dtype).reshape(*x.shape[:-1], out_features)


def _interleave_blocks(gate: Tensor, up: Tensor) -> Tensor:
    """Two tensors holding 16-column blocks along dim 0, interleaved: gate block i, then up block i."""
    return torch.stack([gate, up], dim=1).flatten(0, 1)


def _interleave_columns(gate: Tensor, up: Tensor) -> Tensor:
    """Two per-column vectors (padded to 16) interleaved by 16-column block, as the packed weights are."""
    return _interleave_blocks(gate.view(-1, TILE_N), up.view(-1, TILE_N)).reshape(-1)


class Int8GatedMLP(nn.Module):
    """A gated MLP (``layers.GatedMLP``) whose gate and up projections are one int8 kernel call: their packed weights
    interleaved by 16-column block, act(gate) * up taken in the kernel's epilogue in fp32 (one rounding, no
    separate activation pass); the down projection stays an ``Int8Linear``."""

    def __init__(self, mlp: GatedMLP) -> None:
        super().__init__()
        gate, up = mlp.gate_proj, mlp.up_proj
        self.isa, self.in_features, self.out_features = gate.isa, gate.in_features, gate.out_features
        self.activation = ACTIVATION_CODES[mlp.activation]
        self.register_buffer("packed", _interleave_blocks(gate.packed, up.packed))
        self.register_buffer("w_scale", _interleave_columns(gate.w_scale, up.w_scale))
        self.register_buffer("bias", _interleave_columns(gate.bias, up.bias))
        self.down_proj = mlp.down_proj

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(_on_kernel(self, x, self.out_features, self.activation, gated=True))

    def extra_repr(self) -> str:
        shape = f"in_features={self.in_features}, out_features={self.out_features}"
        return f"{shape}, gate and up fused, int8 {self.isa.upper()}"


def fuse_gated_mlps(model: nn.Module) -> int:
    """Every ``GatedMLP`` of ``model`` whose gate and up projections are on the kernel becomes an
    ``Int8GatedMLP``; returns how many."""
    fused = 0

    def fuse(name: str, module: nn.Module) -> nn.Module | None:
        nonlocal fused
        if not isinstance(module, GatedMLP) or module.activation not in ACTIVATION_CODES:
            return None
        if not (isinstance(module.gate_proj, Int8Linear) and isinstance(module.up_proj, Int8Linear)):
            return None
        if module.gate_proj.isa != module.up_proj.isa:
            return None
        fused += 1
        return Int8GatedMLP(module)

    transform_modules(model, fuse)
    return fused


class Int8SharedInput(nn.Module):
    """Linear layers that read the same input (an attention block's q, k and v) as one int8 kernel call: their packed
    weights, scales and biases concatenated by 16-column block, the input quantized once, the output split back.
    Each column's arithmetic is the same as in its own layer's call."""

    def __init__(self, linears: list[Int8Linear]) -> None:
        super().__init__()
        self.isa, self.in_features = linears[0].isa, linears[0].in_features
        self.widths = [linear.out_features for linear in linears]
        self.padded = [linear.packed.shape[0] * TILE_N for linear in linears]
        self.register_buffer("packed", torch.cat([linear.packed for linear in linears]))
        self.register_buffer("w_scale", torch.cat([linear.w_scale for linear in linears]))
        self.register_buffer("bias", torch.cat([linear.bias for linear in linears]))

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        out = _on_kernel(self, x, sum(self.padded), NO_ACTIVATION)
        parts = out.split(self.padded, dim=-1)
        return tuple(part[..., :width] for part, width in zip(parts, self.widths, strict=True))

    def extra_repr(self) -> str:
        widths = "+".join(map(str, self.widths))
        return f"in_features={self.in_features}, out_features={widths}, one int8 {self.isa.upper()} call"


def fuse_shared_input_projections(model: nn.Module) -> int:
    """Every attention block whose q, k and v projections read one input and are all on the kernel gets them as one
    ``Int8SharedInput`` call (``SharedInputProjections.fused_qkv``; the three layers are dropped); returns how
    many."""
    fused = 0
    for module in model.modules():
        if not isinstance(module, SharedInputProjections) or not module.shares_input:
            continue  # a cross-attention block's k and v read the prefix, even when it is as wide as q's input
        linears = [module.q_proj, module.k_proj, module.v_proj]
        on_kernel = all(isinstance(linear, Int8Linear) and linear.activation is None for linear in linears)
        if on_kernel and len({(linear.in_features, linear.isa) for linear in linears}) == 1:
            module.fused_qkv = Int8SharedInput(linears)
            module.q_proj = module.k_proj = module.v_proj = None
            fused += 1
    return fused


def fuse_mlp_activations(model: nn.Module) -> int:
    """Every ``PointwiseMLP`` of ``model`` whose first projection is on the kernel and whose activation the kernel
    has takes that activation in the kernel's epilogue (one rounding, no separate pass); returns how many."""
    fused = 0
    for module in model.modules():
        on_kernel = isinstance(module, PointwiseMLP) and isinstance(module.fc1, Int8Linear)
        if on_kernel and module.activation in ACTIVATION_CODES and module.fc1.activation is None:
            module.fc1.activation, module.activation = module.activation, "identity"
            fused += 1
    return fused
