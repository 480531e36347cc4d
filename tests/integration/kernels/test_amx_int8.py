"""vlabench's int8 linear (``kernels/amx_int8.py``), on each of its paths (AMX, AVX512-VNNI, AVX2) this CPU runs,
against an exact integer reference, under torch.compile, and as the torch backends' CPU int8 scheme on every model
family; where a path cannot run, why, and the fallback."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess

import pytest
import torch

from tests.support.kernels import AVX2_FLAGS, FAMILIES, ZEN4_FLAGS, runnable_params
from vlabench.errors import UnavailableError
from vlabench.kernels import amx_int8

CPU = torch.device("cpu")
REASONS = {isa: amx_int8.unavailable_reason(isa) for isa in amx_int8.ISAS}
DEFAULT_ISA = amx_int8.runnable_path()  # the scheme a run picks here
needs_kernel = pytest.mark.skipif(DEFAULT_ISA is None, reason=f"no int8 kernel path runs here: {REASONS}")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles the same forward code anew: no recompile limit reached across parametrized cases."""
    torch._dynamo.reset()


@pytest.fixture(params=runnable_params(REASONS))
def isa(request) -> str:
    """Each of the kernel's paths that runs on this CPU (an AMX CPU runs both)."""
    return request.param


WEIGHT_QMAX = {"amx": 127, "vnni": 127, "avx2": 63}  # the AVX2 path's weights are 7-bit (VPMADDUBSW's int16 pairs)


def symmetric_codes(
    rows: torch.Tensor, multiply_by_inverse: bool, qmax: int = 127
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric codes in [-qmax, qmax] (round half to even) and scales absmax / qmax, in fp32 (1 for a zero
    row)."""
    scale = rows.abs().amax(dim=1, keepdim=True) / qmax
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    scaled = rows * (1 / scale) if multiply_by_inverse else rows / scale  # the kernel multiplies by the inverse
    return torch.round(scaled).clamp(-qmax, qmax), scale


def reference(x: torch.Tensor, linear: torch.nn.Linear, isa: str) -> torch.Tensor:
    """The scheme in plain torch: rows of x quantized to int8 and of W to the ``isa`` path's weight codes, exact
    integer dot products (float64), rescaled."""
    x_codes, x_scale = symmetric_codes(x.reshape(-1, linear.in_features).float(), multiply_by_inverse=True)
    w_codes, w_scale = symmetric_codes(linear.weight.detach().float(), False, WEIGHT_QMAX[isa])
    out = (x_codes.double() @ w_codes.double().t()) * x_scale.double() * w_scale.double().t()
    if linear.bias is not None:
        out = out + linear.bias.double()
    return out.reshape(*x.shape[:-1], linear.out_features)


@pytest.mark.parametrize(
    ("rows", "in_features", "out_features"),
    [(1, 64, 16), (50, 720, 2048), (65, 100, 40), (130, 1152, 272), (16, 2048, 720), (7, 33, 5), (36, 320, 48)],
)
@pytest.mark.parametrize("bias", [True, False])
def test_matches_the_integer_reference(rows, in_features, out_features, bias, isa):
    """Row counts around the 16-row tiles and the 64-row block (a last group of 1, 2, 4 or 7 rows: the VNNI path's
    short groups split their sums over alternate k groups), widths off the 64-byte tiles, outputs off 16."""
    torch.manual_seed(rows * in_features + out_features)
    linear = torch.nn.Linear(in_features, out_features, bias=bias)
    x = torch.randn(rows, in_features) * 3
    out = amx_int8.Int8Linear(linear, isa)(x)
    assert out.shape == (rows, out_features) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), reference(x, linear, isa), rtol=1e-5, atol=1e-5)


def test_keeps_batch_dims_and_dtype_and_zero_rows(isa):
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 48)
    x = torch.randn(2, 5, 96).to(torch.bfloat16)
    x[1, 3] = 0
    out = amx_int8.Int8Linear(linear, isa)(x)
    assert out.shape == (2, 5, 48) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out[1, 3].float(), linear.bias.detach().to(torch.bfloat16).float())
    torch.testing.assert_close(out.double(), reference(x.float(), linear, isa), rtol=2e-2, atol=2e-2)


def test_other_float_dtypes_go_through_fp32_and_come_back_in_their_own(isa):
    """fp16 is not a kernel dtype: the rows go in as fp32 and the output is cast back, for every int8 module."""
    torch.manual_seed(2)
    module = amx_int8.Int8Linear(torch.nn.Linear(96, 40), isa)
    _, gated = gated_pair(96, 48, "silu", 2, isa)
    x = torch.randn(3, 4, 96).to(torch.float16)
    with torch.inference_mode():
        for call in (module, gated):
            out = call(x)
            assert out.dtype == torch.float16 and out.shape[:-1] == (3, 4)
            assert torch.equal(out, call(x.float()).to(torch.float16))


@pytest.mark.parametrize(("rows", "in_features", "out_features"), [(50, 720, 2048), (7, 33, 5)])
def test_bf16_runs_in_the_kernel_as_its_fp32_result_rounded(rows, in_features, out_features, isa):
    """bf16 activations are read and written by the kernel itself: the same sums as the fp32 path on the same
    values, rounded to nearest even like torch's own conversion (masked tails included)."""
    torch.manual_seed(rows + in_features)
    module = amx_int8.Int8Linear(torch.nn.Linear(in_features, out_features), isa)
    x = (torch.randn(rows, in_features) * 3).to(torch.bfloat16)
    out = module(x)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, module(x.float()).to(torch.bfloat16))


def test_compiles_as_one_opaque_call(isa):
    """fullgraph compile keeps the custom op (no graph break) and gives the eager result."""
    torch.manual_seed(1)
    module = amx_int8.Int8Linear(torch.nn.Linear(200, 80), isa)
    x = torch.randn(3, 17, 200)
    compiled = torch.compile(module, fullgraph=True, dynamic=False)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), module(x), rtol=0, atol=0)


ACTIVATIONS = {"silu": torch.nn.functional.silu, "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def gated_pair(hidden: int, intermediate: int, activation: str, seed: int, isa: str):
    """A float GatedMLP and its fused form on the kernel's ``isa`` path with the down projection taken off (its
    output is act(gate) * up)."""
    from vlabench.models.replicas.layers import GatedMLP

    torch.manual_seed(seed)
    mlp = GatedMLP(hidden, intermediate, activation)
    for linear in (mlp.gate_proj, mlp.up_proj):
        torch.nn.init.normal_(linear.weight, std=0.2)
    on_kernel = GatedMLP(hidden, intermediate, activation)
    on_kernel.gate_proj, on_kernel.up_proj = (amx_int8.Int8Linear(m, isa) for m in (mlp.gate_proj, mlp.up_proj))
    fused = amx_int8.Int8GatedMLP(on_kernel)
    fused.down_proj = torch.nn.Identity()
    return mlp, fused


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize(
    ("rows", "hidden", "intermediate"), [(1, 64, 16), (50, 720, 2048), (17, 72, 40), (70, 100, 48)]
)
def test_the_gated_call_is_the_activated_gate_times_up(activation, rows, hidden, intermediate, isa):
    """One call for gate and up: act(gate) * up of the two integer references, the activation in the kernel's
    epilogue (outputs off 16 and row counts around the tiles)."""
    mlp, fused = gated_pair(hidden, intermediate, activation, rows + hidden, isa)
    x = torch.randn(rows, hidden) * 3
    gate, up = reference(x, mlp.gate_proj, isa), reference(x, mlp.up_proj, isa)
    expected = ACTIVATIONS[activation](gate) * up
    with torch.inference_mode():
        out = fused(x)
    assert out.shape == (rows, intermediate) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_the_gated_call_in_bf16_is_its_fp32_result_rounded_and_compiles(activation, isa):
    """bf16 in and out, one rounding of the fp32 result; fullgraph compile keeps it one opaque call."""
    _, fused = gated_pair(720, 2048, activation, 3, isa)
    x = (torch.randn(2, 25, 720) * 3).to(torch.bfloat16)
    with torch.inference_mode():
        out = fused(x)
        assert out.dtype == torch.bfloat16 and out.shape == (2, 25, 2048)
        assert torch.equal(out, fused(x.float()).to(torch.bfloat16))
        compiled = torch.compile(fused, fullgraph=True, dynamic=False)
        assert torch.equal(compiled(x), out)


def on_kernel_with(activation: str, linear: torch.nn.Linear, isa: str) -> amx_int8.Int8Linear:
    module = amx_int8.Int8Linear(linear, isa)
    module.activation = activation
    return module


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize(("rows", "in_features", "out_features"), [(1, 64, 16), (50, 768, 3072), (70, 100, 40)])
def test_the_activation_is_taken_in_the_epilogue(activation, rows, in_features, out_features, isa):
    """act(x W^T + b) of the integer reference, in fp32; bf16 is the fp32 result rounded once; compile = eager."""
    torch.manual_seed(rows + in_features)
    linear = torch.nn.Linear(in_features, out_features)
    module = on_kernel_with(activation, linear, isa)
    x = torch.randn(rows, in_features) * 3
    with torch.inference_mode():
        out = module(x)
        torch.testing.assert_close(
            out.double(), ACTIVATIONS[activation](reference(x, linear, isa)), rtol=1e-5, atol=1e-5
        )
        x16 = x.to(torch.bfloat16)
        assert torch.equal(module(x16), module(x16.float()).to(torch.bfloat16))
        assert torch.equal(torch.compile(module, fullgraph=True, dynamic=False)(x16), module(x16))


def test_a_pointwise_mlp_hands_its_activation_to_the_kernel_once(isa):
    """SigLIP's tanh-GELU MLP takes its activation in fc1's epilogue (the MLP's own becomes the identity, the
    output stays the MLP's); exact GELU has no kernel form and stays as it is; a second pass fuses nothing."""
    from vlabench.models.replicas.layers import PointwiseMLP

    torch.manual_seed(5)
    mlps = {name: PointwiseMLP(96, 160, name) for name in ("gelu_tanh", "gelu")}
    for mlp in mlps.values():
        mlp.fc1 = amx_int8.Int8Linear(mlp.fc1, isa)
    x = torch.randn(2, 9, 96)
    with torch.inference_mode():
        before = {name: mlp(x) for name, mlp in mlps.items()}
        model = torch.nn.ModuleDict(mlps)
        assert amx_int8.fuse_mlp_activations(model) == 1
        assert amx_int8.fuse_mlp_activations(model) == 0
        tanh, exact = mlps["gelu_tanh"], mlps["gelu"]
        assert (tanh.activation, tanh.fc1.activation) == ("identity", "gelu_tanh") and "then gelu_tanh" in repr(tanh)
        assert (exact.activation, exact.fc1.activation) == ("gelu", None)
        torch.testing.assert_close(tanh(x), before["gelu_tanh"], rtol=1e-5, atol=1e-5)
        assert torch.equal(exact(x), before["gelu"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shared_input_projections_run_as_one_call_with_each_layers_numbers(dtype, isa):
    """q, k and v of a self-attention block (widths off 16) and of SigLIP's attention become one call whose outputs
    equal the three calls' bit for bit, eager and compiled; a cross-attention block (k and v read the prefix) keeps
    its three layers, also when the prefix is as wide as its own input."""
    from vlabench.models.replicas.layers import SelfAttentionProjections
    from vlabench.models.replicas.vision import SiglipAttention
    from vlabench.models.specs import load_model_spec

    torch.manual_seed(11)
    blocks = {
        "self": SelfAttentionProjections(72, 5, 3, 8),
        "siglip": SiglipAttention(load_model_spec("smolvla-tiny").vision),
        "cross": SelfAttentionProjections(72, 5, 3, 8, kv_in=40),
        "cross_as_wide": SelfAttentionProjections(72, 5, 3, 8, kv_in=72),
    }
    for block in blocks.values():
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(block, name, amx_int8.Int8Linear(getattr(block, name), isa))
    inputs = {name: torch.randn(2, 9, block.q_proj.in_features).to(dtype) for name, block in blocks.items()}
    with torch.inference_mode():
        before = {name: block.project(inputs[name]) for name, block in blocks.items() if "cross" not in name}
        assert amx_int8.fuse_shared_input_projections(torch.nn.ModuleDict(blocks)) == 2
        for cross in ("cross", "cross_as_wide"):
            assert blocks[cross].fused_qkv is None and isinstance(blocks[cross].k_proj, amx_int8.Int8Linear)
        for name, expected in before.items():
            block = blocks[name]
            assert isinstance(block.fused_qkv, amx_int8.Int8SharedInput) and block.q_proj is None
            fused = block.project(inputs[name])
            compiled = torch.compile(block.project, fullgraph=True, dynamic=False)(inputs[name])
            for one, shared, traced in zip(expected, fused, compiled, strict=True):
                assert shared.dtype == dtype and torch.equal(shared, one) and torch.equal(traced, one)


def test_activation_codes_outside_the_kernels_are_refused(isa):
    module = amx_int8.Int8Linear(torch.nn.Linear(64, 16), isa)
    x = torch.randn(2, 64)
    with pytest.raises(RuntimeError, match=r"activation is -1 \(none\), 0 \(SiLU\) or 1"):
        getattr(torch.ops.vlabench, f"{isa}_int8_linear")(x, module.packed, module.w_scale, module.bias, 16, 2)
    _, fused = gated_pair(64, 16, "silu", 0, isa)
    with pytest.raises(RuntimeError, match=r"a gated call's activation is 0 \(SiLU\) or 1"):
        getattr(torch.ops.vlabench, f"{isa}_int8_gated_linear")(x, fused.packed, fused.w_scale, fused.bias, 16, -1)


def test_unavailable_names_the_missing_cpu_flags(monkeypatch):
    """A Zen 4 runs the VNNI path and not the AMX one (the reason lists what is missing); an AVX2-only CPU only the
    AVX2 path; the float parts are bf16 only where the CPU has AVX512-BF16 and the path reads bf16."""
    monkeypatch.setattr(amx_int8, "read_cpu_flags", lambda: ZEN4_FLAGS)
    reason = amx_int8.unavailable_reason("amx")
    assert reason is not None and "missing here: amx_tile, amx_int8, amx_bf16" in reason
    assert amx_int8.unavailable_reason("vnni") is None or "needs ninja" in amx_int8.unavailable_reason("vnni")
    assert amx_int8.float_dtype("vnni") == torch.bfloat16
    assert amx_int8.float_dtype("avx2") == torch.float32  # the AVX2 path takes fp32 activations
    monkeypatch.setattr(amx_int8, "read_cpu_flags", lambda: AVX2_FLAGS)
    assert "missing here: avx512f, avx512bw, avx512_vnni" in amx_int8.unavailable_reason("vnni")
    assert amx_int8.unavailable_reason("avx2") is None or "needs ninja" in amx_int8.unavailable_reason("avx2")
    assert amx_int8.float_dtype("vnni") == torch.float32
    monkeypatch.setattr(amx_int8, "read_cpu_flags", lambda: AVX2_FLAGS - {"fma"})
    assert "missing here: fma" in amx_int8.unavailable_reason("avx2")
    with pytest.raises(ValueError, match="no int8 kernel path 'sse4'"):
        amx_int8.Int8Linear(torch.nn.Linear(4, 4), "sse4")


def test_the_int8_scheme_takes_the_first_kernel_path_that_runs_and_says_why_not_the_others(monkeypatch):
    import vlabench.backends.torch.quantize as torch_quantize

    reasons = {"amx": "no AMX on this CPU", "vnni": None, "avx2": None}
    monkeypatch.setattr(amx_int8, "unavailable_reason", lambda isa="amx": reasons[isa])
    assert torch_quantize.choose_int8_scheme(CPU, None) == ("vnni", {"amx": "no AMX on this CPU"})
    with pytest.raises(UnavailableError, match="no AMX on this CPU"):
        torch_quantize.choose_int8_scheme(CPU, "amx")
    assert torch_quantize.choose_int8_scheme(CPU, "vnni") == ("vnni", {})
    reasons["vnni"] = "no VNNI either"
    assert torch_quantize.choose_int8_scheme(CPU, None) == (
        "avx2",
        {"amx": "no AMX on this CPU", "vnni": "no VNNI either"},
    )
    reasons["avx2"] = "no AVX2"
    assert torch_quantize.choose_int8_scheme(CPU, None) == (
        "torchao",
        {"amx": "no AMX on this CPU", "vnni": "no VNNI either", "avx2": "no AVX2"},
    )
    assert torch_quantize.choose_int8_scheme(CPU, "torchao") == ("torchao", {})
    with pytest.raises(UnavailableError, match="no VNNI either"):
        torch_quantize.choose_int8_scheme(CPU, "vnni")
    with pytest.raises(UnavailableError, match="CPU int8 scheme"):
        torch_quantize.choose_int8_scheme(torch.device("cuda"), "amx")


def on_path(module: torch.nn.Module, isa: str) -> torch.nn.Module:
    """A copy of an int8 module (its packed weight as it is) whose calls go to the kernel's ``isa`` path."""
    twin = copy.deepcopy(module)
    twin.isa = isa
    return twin


@pytest.mark.skipif(REASONS["vnni"] or REASONS["avx2"], reason=f"needs the vnni and avx2 paths: {REASONS}")
@pytest.mark.parametrize("activation", [None, *sorted(ACTIVATIONS)])
@pytest.mark.parametrize(("rows", "in_features", "out_features"), [(50, 720, 2048), (7, 33, 5), (130, 100, 40)])
def test_the_avx2_path_gives_the_vnni_paths_fp32_outputs_bit_for_bit(activation, rows, in_features, out_features):
    """On the same (7-bit) packed weight: exact int32 sums (the activation codes offset to u8, no int16 saturation
    at the codes' extremes, the offset taken off again) and the same epilogue operations give the same fp32 outputs,
    plain and gated, tails included."""
    torch.manual_seed(rows + in_features)
    linear = torch.nn.Linear(in_features, out_features)
    with torch.no_grad():
        linear.weight[0] = linear.weight.abs().max()  # codes of +-63 against +-127: the largest pair sums
        linear.weight[-1, ::2] = -linear.weight.abs().max()
    x = torch.randn(rows, in_features) * 3
    x[0] = x[0].abs().max() * torch.sign(torch.randn(in_features))
    avx2 = on_kernel_with(activation, linear, "avx2") if activation else amx_int8.Int8Linear(linear, "avx2")
    assert avx2.packed.abs().max() == 63
    assert torch.equal(avx2(x), on_path(avx2, "vnni")(x))
    if activation:
        _, gated = gated_pair(in_features, out_features, activation, rows, "avx2")
        assert torch.equal(gated(x), on_path(gated, "vnni")(x))


def test_the_avx2_paths_weight_codes_are_7_bit_and_the_others_8_bit():
    """VPMADDUBSW's int16 pairs stay exact only with weight codes within +-63 (the activations offset to u8)."""
    torch.manual_seed(4)
    linear = torch.nn.Linear(64, 32)
    codes = {isa: amx_int8.quantize_weight(linear.weight, amx_int8.WEIGHT_QMAX[isa])[0] for isa in amx_int8.ISAS}
    assert {isa: int(code.abs().max()) for isa, code in codes.items()} == {"amx": 127, "vnni": 127, "avx2": 63}
    assert len(codes["avx2"].unique()) > 64  # the 7-bit range is used, not a coarser one


@pytest.mark.skipif(REASONS["avx2"] is not None, reason=f"the avx2 path cannot run here: {REASONS['avx2']}")
def test_the_avx2_library_holds_no_avx512_instruction():
    """The AVX2 path is loadable on a CPU without AVX-512: its library's own code has no zmm or opmask register."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) is not installed")
    library = amx_int8.extension("avx2")
    listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", library], capture_output=True, text=True, check=True)
    code = listing.stdout
    assert "vpmaddubsw" in code and "vpmaddwd" in code  # it is the AVX2 kernel
    assert "%zmm" not in code and not re.search(r"%k[0-7]\b", code)
    if REASONS["vnni"] is None:  # the check sees AVX-512 code where there is some
        avx512 = amx_int8.extension("avx512")
        other = subprocess.run(
            [objdump, "-d", "--no-show-raw-insn", avx512], capture_output=True, text=True, check=True
        )
        assert "%zmm" in other.stdout


@needs_kernel
@pytest.mark.parametrize("scheme", ["default", "avx2"])
@pytest.mark.parametrize("name", FAMILIES)
def test_torch_int8_runs_every_family_on_the_kernel(name, scheme, tiny_inputs):
    """Every Linear the scheme takes runs on the kernel (the path a default run picks here, and the AVX2 path asked
    for), and the actions stay within the int8 gate; attention runs on the attention kernel's AMX path under the AMX
    scheme, on its AVX-512 one under the VNNI scheme with bf16 float parts, and on the int8 attention kernel under
    AVX2 (which takes the vision towers' unmasked attention)."""
    pytest.importorskip("torchao")
    from tests.support.quantized_reference import check, run_against_reference
    from vlabench.backends.torch.backend import TorchBackend
    from vlabench.kernels.amx_attention import AmxAttention
    from vlabench.kernels.int8_attention import Int8Attention

    isa = DEFAULT_ISA if scheme == "default" else scheme
    if REASONS[isa] is not None:
        pytest.skip(f"the {isa} path cannot run here: {REASONS[isa]}")
    policy = TorchBackend(quant_scheme=None if scheme == "default" else isa).prepare(
        *tiny_inputs(name)[:2], CPU, "int8", 0
    )
    details = policy.details()
    assert details["quantization_scheme"] == isa and isa.upper() in details["quantization"]
    assert all(m.isa == isa for m in policy.model.modules() if hasattr(m, "packed"))
    kernels = sum(isinstance(m, amx_int8.Int8Linear) for m in policy.model.modules())
    fused_pairs = 2 * sum(isinstance(m, amx_int8.Int8GatedMLP) for m in policy.model.modules())
    shared = sum(isinstance(m, amx_int8.Int8SharedInput) for m in policy.model.modules())
    assert shared == details["kernel_fused_qkv"]
    assert shared > 0 or name in ("act-tiny", "diffusion-policy-tiny")  # their attention is nn.MultiheadAttention
    # a fused MLP holds its gate and up, a shared-input call its q, k and v
    assert kernels + fused_pairs + 3 * shared == details["quantized_linears"] > 0
    kind = Int8Attention if isa == "avx2" else AmxAttention
    attention = sum(isinstance(m, kind) for m in policy.model.modules())
    assert attention == details.get("kernel_attention_modules", 0)
    unit = {"amx": "amx", "vnni": "avx512" if amx_int8.float_dtype("vnni") == torch.bfloat16 else None}.get(isa, isa)
    assert details.get("attention_unit") == unit
    assert all(m.unit == unit for m in policy.model.modules() if isinstance(m, AmxAttention))
    gated = sum(isinstance(m, amx_int8.Int8GatedMLP) for m in policy.model.modules())
    assert gated == details["kernel_gated_mlps"]
    activated = [m for m in policy.model.modules() if isinstance(m, amx_int8.Int8Linear) and m.activation]
    assert len(activated) == details["kernel_fused_activations"]
    assert activated or name in ("act-tiny", "diffusion-policy-tiny")  # SigLIP's MLPs, in every VLA family
    assert gated > 0 or name in ("gr00t-n1.5-tiny", "act-tiny", "diffusion-policy-tiny")  # no gated MLP in them
    no_sdpa = name in ("act-tiny", "diffusion-policy-tiny")  # their attention is nn.MultiheadAttention
    assert attention > 0 if unit and not no_sdpa else attention == 0
    actions, verdict, agreement = run_against_reference(policy, name, tiny_inputs, "int8")
    assert torch.isfinite(actions).all()
    check(verdict, agreement, name, "int8")


@needs_kernel
def test_the_kernel_scheme_runs_bf16_float_parts_behind_an_fp32_boundary(tiny_inputs):
    """Inputs and velocities stay fp32 for the run; the cache between them is the replica's float dtype (bf16 on
    every CPU with AVX512-BF16); torchao's scheme stays fp32 throughout."""
    pytest.importorskip("torchao")
    from vlabench.backends.torch.backend import TorchBackend

    spec, workload, obs, noise = tiny_inputs("smolvla-tiny")
    policy = TorchBackend(quant_scheme=DEFAULT_ISA).prepare(spec, workload, CPU, "int8", 0)
    float_parts = amx_int8.float_dtype(DEFAULT_ISA)
    assert policy.details()["float_activations"] == {torch.bfloat16: "bf16", torch.float32: "fp32"}[float_parts]
    cache = policy.prefix(obs)
    assert obs.images.dtype == torch.float32 and cache.keys.dtype == float_parts
    assert policy.denoise_step(noise, torch.full((1,), 0.9), cache).dtype == torch.float32
    torchao = TorchBackend(quant_scheme="torchao").prepare(spec, workload, CPU, "int8", 0)
    assert torchao.details()["float_activations"] == "fp32"
    assert torchao.prefix(obs).keys.dtype == torch.float32


@pytest.mark.skipif(REASONS["vnni"] is not None, reason=f"the vnni path cannot run here: {REASONS['vnni']}")
def test_the_vnni_scheme_without_native_bf16_keeps_the_float_parts_in_fp32(monkeypatch, tiny_inputs):
    """On a VNNI CPU without AVX512-BF16 (a Cascade Lake: this CPU's flags less avx512_bf16) the scheme's float
    parts and the kernel's activations are fp32, the scheme says so, and the actions pass the int8 gate."""
    pytest.importorskip("torchao")
    import vlabench.backends.torch.quantize as torch_quantize
    from tests.support.quantized_reference import check, run_against_reference
    from vlabench.backends.torch.backend import TorchBackend

    flags = amx_int8.read_cpu_flags() - {"avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"}
    monkeypatch.setattr(amx_int8, "read_cpu_flags", lambda: flags)
    assert torch_quantize.choose_int8_scheme(CPU, None)[0] == "vnni"
    spec, workload, obs, _ = tiny_inputs("smolvla-tiny")
    policy = TorchBackend().prepare(spec, workload, CPU, "int8", 0)
    details = policy.details()
    assert details["float_activations"] == "fp32" and "float parts in fp32" in details["quantization"]
    assert policy.prefix(obs).keys.dtype == torch.float32
    actions, verdict, agreement = run_against_reference(policy, "smolvla-tiny", tiny_inputs, "int8")
    assert torch.isfinite(actions).all()
    check(verdict, agreement, "smolvla-tiny", "int8")


@needs_kernel
@pytest.mark.parametrize("name", ["smolvla-tiny", "act-tiny"])
def test_torch_compile_int8_matches_eager_int8(name, tiny_inputs):
    """The compiled int8 replica runs the same kernel and bf16 float parts as eager, inside the int8 gate."""
    from tests.support.quantized_reference import run_against_reference
    from vlabench.backends.torch.backend import TorchBackend
    from vlabench.backends.torch_compile.backend import TorchCompileBackend

    spec, workload = tiny_inputs(name)[:2]
    compiled = TorchCompileBackend().prepare(spec, workload, CPU, "int8", 0)
    eager = TorchBackend().prepare(spec, workload, CPU, "int8", 0)
    assert compiled.details()["quantization_scheme"] == DEFAULT_ISA and compiled.details()["compile_total_s"] > 0
    ours, (verdict, _), _ = run_against_reference(compiled, name, tiny_inputs, "int8")
    theirs, _, _ = run_against_reference(eager, name, tiny_inputs, "int8")
    assert verdict.passed, verdict
    # The float parts run in bf16: inductor keeps a fused elementwise chain in fp32 where eager rounds every op to
    # bf16, so the two agree to bf16's resolution, not bit for bit.
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-2)
