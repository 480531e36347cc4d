"""lerobot checkpoint layouts checked against names that do NOT come from the loader's own rename table.

Two kinds of ground truth, kept apart:

- **A real file header (SmolVLA).** ``tests/data/checkpoints/lerobot_smolvla_safetensors_header.json`` holds the
  names, dtypes and shapes of the ``model.safetensors`` that lerobot 0.4.4 writes with
  ``SmolVLAPolicy.save_pretrained()`` (default ``SmolVLAConfig``: 16 VLM layers, 1 camera at 512 px, state 6 and
  action 6 padded to 32); copied from ``shared/fixtures`` with its ``source`` field. A full-size file with exactly
  that header is written and loaded through ``load_checkpoint``.
- **Layouts transcribed from lerobot 0.4.4's source (π0, π0.5, ACT, Diffusion Policy).** The ``*_layout``
  builders below restate, module by module, what lerobot's ``__init__`` methods register (file and class cited on
  each), at lerobot's default configuration. The same SigLIP and decoder-layer helpers rebuild the SmolVLA layout,
  which must equal the real header: that checks the helpers against a real file.

For every layout: every replica weight is filled from a file tensor of the same shape, and every file tensor is
either loaded or in the family's documented ignore list; nothing is left unexpected.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from tests.support.paths import DATA
from vlabench.models.checkpoints import KeyMatch, load_checkpoint, match_keys
from vlabench.models.replicas import replica_class
from vlabench.models.specs import ModelSpec, load_model_spec

FIXTURE = DATA / "checkpoints" / "lerobot_smolvla_safetensors_header.json"
CPU = torch.device("cpu")

Shape = tuple[int, ...]
Layout = dict[str, Shape]  # lerobot key -> shape, as in a model.safetensors header

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def fixture_header() -> dict[str, tuple[str, Shape]]:
    """The real SmolVLA header: key -> (dtype, shape). A missing fixture fails (CI has it), it never skips."""
    if not FIXTURE.is_file():
        pytest.fail(f"real-file fixture missing: {FIXTURE} (copy of shared/fixtures/{FIXTURE.name})")
    data = json.loads(FIXTURE.read_text())
    assert data["source"].startswith("lerobot 0.4.4 SmolVLAPolicy"), data["source"]
    return {key: (entry["dtype"], tuple(entry["shape"])) for key, entry in data["tensors"].items()}


# ---- layout helpers: what torch / transformers modules register, by name ---------------------------------------


def linear(name: str, fan_in: int, fan_out: int, bias: bool = True) -> Layout:
    return {f"{name}.weight": (fan_out, fan_in)} | ({f"{name}.bias": (fan_out,)} if bias else {})


def affine(name: str, dim: int) -> Layout:
    """nn.LayerNorm / nn.GroupNorm: weight and bias."""
    return {f"{name}.weight": (dim,), f"{name}.bias": (dim,)}


def frozen_batch_norm(name: str, dim: int) -> Layout:
    """torchvision.ops.FrozenBatchNorm2d: four buffers, no num_batches_tracked."""
    return {f"{name}.{field}": (dim,) for field in ("weight", "bias", "running_mean", "running_var")}


def conv(name: str, cin: int, cout: int, *kernel: int, bias: bool = True) -> Layout:
    return {f"{name}.weight": (cout, cin, *kernel)} | ({f"{name}.bias": (cout,)} if bias else {})


def multihead_attention(name: str, dim: int) -> Layout:
    """nn.MultiheadAttention with equal q/k/v widths: packed in_proj plus out_proj."""
    return {f"{name}.in_proj_weight": (3 * dim, dim), f"{name}.in_proj_bias": (3 * dim,)} | linear(
        f"{name}.out_proj", dim, dim
    )


def resnet18(prefix: str, norm: Callable[[str, int], Layout], names: tuple[str, ...]) -> Layout:
    """torchvision.models.resnet18 (BasicBlock ×[2, 2, 2, 2]) without avgpool/fc; ``names``: the stem conv, the stem
    norm and the four stages as the holding module names them."""
    stem_conv, stem_norm, *stages = names
    out = conv(f"{prefix}{stem_conv}", 3, 64, 7, 7, bias=False) | norm(f"{prefix}{stem_norm}", 64)
    cin = 64
    for stage, planes in zip(stages, (64, 128, 256, 512), strict=True):
        for block in range(2):
            p = f"{prefix}{stage}.{block}."
            width = cin if block == 0 else planes
            out |= conv(p + "conv1", width, planes, 3, 3, bias=False) | norm(p + "bn1", planes)
            out |= conv(p + "conv2", planes, planes, 3, 3, bias=False) | norm(p + "bn2", planes)
            if width != planes:
                out |= conv(p + "downsample.0", width, planes, 1, 1, bias=False) | norm(p + "downsample.1", planes)
        cin = planes
    return out


def siglip(prefix: str, *, hidden: int, layers: int, intermediate: int, patch: int, image: int) -> Layout:
    """transformers SiglipVisionTransformer (no pooling head): embeddings, encoder layers, post_layernorm."""
    out = conv(f"{prefix}embeddings.patch_embedding", 3, hidden, patch, patch)
    out[f"{prefix}embeddings.position_embedding.weight"] = ((image // patch) ** 2, hidden)
    for i in range(layers):
        p = f"{prefix}encoder.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out |= linear(p + f"self_attn.{proj}", hidden, hidden)
        out |= affine(p + "layer_norm1", hidden) | affine(p + "layer_norm2", hidden)
        out |= linear(p + "mlp.fc1", hidden, intermediate) | linear(p + "mlp.fc2", intermediate, hidden)
    return out | affine(f"{prefix}post_layernorm", hidden)


def rms_norm(name: str, dim: int, adarms: bool = False) -> Layout:
    """Llama/Gemma RMSNorm (``weight``), or openpi's adaptive GemmaRMSNorm (``dense``: cond → scale, shift, gate)."""
    return linear(f"{name}.dense", dim, 3 * dim) if adarms else {f"{name}.weight": (dim,)}


def decoder_layers(
    prefix: str,
    *,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate: int,
    kv_in: Callable[[int], int] | None = None,
    adarms: bool = False,
) -> Layout:
    """transformers Llama/Gemma decoder layers (no biases); ``kv_in(i)``: layer i's k/v input width."""
    out: Layout = {}
    for i in range(layers):
        p = f"{prefix}{i}."
        width = kv_in(i) if kv_in else hidden
        out |= linear(p + "self_attn.q_proj", hidden, heads * head_dim, bias=False)
        out |= linear(p + "self_attn.k_proj", width, kv_heads * head_dim, bias=False)
        out |= linear(p + "self_attn.v_proj", width, kv_heads * head_dim, bias=False)
        out |= linear(p + "self_attn.o_proj", heads * head_dim, hidden, bias=False)
        for proj in ("gate_proj", "up_proj"):
            out |= linear(p + f"mlp.{proj}", hidden, intermediate, bias=False)
        out |= linear(p + "mlp.down_proj", intermediate, hidden, bias=False)
        out |= rms_norm(p + "input_layernorm", hidden, adarms) | rms_norm(
            p + "post_attention_layernorm", hidden, adarms
        )
    return out


# ---- lerobot 0.4.4 layouts, transcribed from its source --------------------------------------------------------


def smolvla_intermediate(hidden: int, multiplier: int = 4, multiple_of: int = 256) -> int:
    """lerobot smolvla/smolvlm_with_expert.py ``get_intermediate_size``."""
    width = multiplier * int(2 * hidden / 3)
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


def smolvla_layout(
    *,
    vision_hidden: int = 768,  # SmolVLM2-500M-Video-Instruct vision_config (SigLIP-B/16 at 512 px)
    vision_layers: int = 12,
    vision_intermediate: int = 3072,
    patch: int = 16,
    image: int = 512,
    scale_factor: int = 4,  # SmolVLMConnector pixel shuffle
    hidden: int = 960,  # text_config
    heads: int = 15,
    kv_heads: int = 5,
    head_dim: int = 64,
    intermediate: int = 2560,
    vocab: int = 49280,
    vlm_layers: int = 16,  # SmolVLAConfig.num_vlm_layers
    expert_width_multiplier: float = 0.75,  # SmolVLAConfig.expert_width_multiplier
    self_attn_every: int = 2,  # SmolVLAConfig.self_attn_every_n_layers (attention_mode "cross_attn")
    max_dim: int = 32,  # SmolVLAConfig.max_state_dim / max_action_dim
) -> Layout:
    """lerobot smolvla/smolvlm_with_expert.py ``SmolVLMWithExpertModel.__init__`` (``vlm`` =
    SmolVLMForConditionalGeneration with ``text_model.layers`` cut to ``num_vlm_layers``; ``lm_expert`` = AutoModel of
    the text config at 0.75 width, ``embed_tokens`` set to None, the k/v projections of every layer not divisible by
    ``self_attn_every_n_layers`` re-made to read the VLM's kv width) and smolvla/modeling_smolvla.py
    ``VLAFlowMatching.__init__`` (state_proj, action_in/out_proj, action_time_mlp_in/out)."""
    vlm = "model.vlm_with_expert.vlm."
    expert_hidden = int(hidden * expert_width_multiplier)
    out = siglip(
        vlm + "model.vision_model.",
        hidden=vision_hidden,
        layers=vision_layers,
        intermediate=vision_intermediate,
        patch=patch,
        image=image,
    )
    out |= linear(vlm + "model.connector.modality_projection.proj", vision_hidden * scale_factor**2, hidden, False)
    out[vlm + "model.text_model.embed_tokens.weight"] = (vocab, hidden)
    out |= decoder_layers(
        vlm + "model.text_model.layers.",
        layers=vlm_layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
    )
    out |= rms_norm(vlm + "model.text_model.norm", hidden)
    out |= linear(vlm + "lm_head", hidden, vocab, bias=False)  # SmolVLM does not tie it to embed_tokens
    out |= decoder_layers(
        "model.vlm_with_expert.lm_expert.layers.",
        layers=vlm_layers,
        hidden=expert_hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=smolvla_intermediate(expert_hidden),
        kv_in=lambda i: expert_hidden if i % self_attn_every == 0 else kv_heads * head_dim,
    )
    out |= rms_norm("model.vlm_with_expert.lm_expert.norm", expert_hidden)
    out |= linear("model.state_proj", max_dim, hidden)
    out |= linear("model.action_in_proj", max_dim, expert_hidden) | linear(
        "model.action_out_proj", expert_hidden, max_dim
    )
    out |= linear("model.action_time_mlp_in", 2 * expert_hidden, expert_hidden)
    return out | linear("model.action_time_mlp_out", expert_hidden, expert_hidden)


def paligemma_layout(
    version: str,
    *,
    transformers_layout: str = "4.52+",
    vision_hidden: int = 1152,  # transformers PaliGemmaConfig default vision_config (SigLIP So400m/14)
    vision_layers: int = 27,
    vision_intermediate: int = 4304,  # set by lerobot PaliGemmaWithExpertModel
    patch: int = 14,
    image: int = 224,  # PI0Config/PI05Config.image_resolution
    hidden: int = 2048,  # get_gemma_config("gemma_2b")
    layers: int = 18,
    intermediate: int = 16384,
    vocab: int = 257152,
    expert_hidden: int = 1024,  # get_gemma_config("gemma_300m")
    expert_intermediate: int = 4096,
    heads: int = 8,  # both variants
    kv_heads: int = 1,
    head_dim: int = 256,
    max_dim: int = 32,  # max_state_dim / max_action_dim
) -> Layout:
    """lerobot pi0/modeling_pi0.py and pi05/modeling_pi05.py: ``PaliGemmaWithExpertModel.__init__`` (``paligemma`` =
    PaliGemmaForConditionalGeneration, ``gemma_expert`` = GemmaForCausalLM with ``model.embed_tokens`` set to None,
    adaRMS in the expert for π0.5) and ``PI0Pytorch`` / ``PI05Pytorch.__init__`` (π0: state_proj and
    action_time_mlp_*, π0.5: time_mlp_*).

    PaliGemma's ``lm_head`` is tied to ``embed_tokens``; ``save_pretrained`` (safetensors ``save_model``) drops all but
    the alphabetically first name of a tied group, which is ``lm_head.weight`` in both transformers layouts, so the file
    holds no ``embed_tokens`` (huggingface/lerobot#2151 and #2307 report exactly that for lerobot/pi0_base and
    pi05_base). ``transformers_layout``: "4.52+" (``paligemma.model.{vision_tower, multi_modal_projector,
    language_model}``, ``paligemma.lm_head``; what lerobot 0.4.4 needs) or "<4.52" (``paligemma.vision_tower``,
    ``paligemma.language_model.model``, ``paligemma.language_model.lm_head``; lerobot#1529)."""
    assert version in ("pi0", "pi05")
    adarms = version == "pi05"
    pg = "model.paligemma_with_expert.paligemma."
    if transformers_layout == "4.52+":
        vision, projector, language, lm_head = (
            pg + "model.vision_tower.vision_model.",
            pg + "model.multi_modal_projector.linear",
            pg + "model.language_model.",
            pg + "lm_head",
        )
    else:
        vision, projector, language, lm_head = (
            pg + "vision_tower.vision_model.",
            pg + "multi_modal_projector.linear",
            pg + "language_model.model.",
            pg + "language_model.lm_head",
        )
    out = siglip(
        vision, hidden=vision_hidden, layers=vision_layers, intermediate=vision_intermediate, patch=patch, image=image
    )
    out |= linear(projector, vision_hidden, hidden)  # projection_dim = 2048 = the Gemma-2B width
    out |= decoder_layers(
        language + "layers.",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
    )
    out |= rms_norm(language + "norm", hidden)
    out |= linear(lm_head, hidden, vocab, bias=False)  # tied: stands for embed_tokens too
    expert = "model.paligemma_with_expert.gemma_expert."
    out |= decoder_layers(
        expert + "model.layers.",
        layers=layers,
        hidden=expert_hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=expert_intermediate,
        adarms=adarms,
    )
    out |= rms_norm(expert + "model.norm", expert_hidden, adarms)
    out |= linear(expert + "lm_head", expert_hidden, vocab, bias=False)  # its embed_tokens is None: not tied, kept
    out |= linear("model.action_in_proj", max_dim, expert_hidden) | linear(
        "model.action_out_proj", expert_hidden, max_dim
    )
    if adarms:
        return (
            out
            | linear("model.time_mlp_in", expert_hidden, expert_hidden)
            | linear("model.time_mlp_out", expert_hidden, expert_hidden)
        )
    out |= linear("model.state_proj", max_dim, expert_hidden)
    out |= linear("model.action_time_mlp_in", 2 * expert_hidden, expert_hidden)
    return out | linear("model.action_time_mlp_out", expert_hidden, expert_hidden)


def act_layout(
    *,
    dim: int = 512,  # ACTConfig.dim_model
    feedforward: int = 3200,  # dim_feedforward
    encoder_layers: int = 4,  # n_encoder_layers
    decoder_layers: int = 1,  # n_decoder_layers
    vae_encoder_layers: int = 4,  # n_vae_encoder_layers (use_vae=True)
    latent_dim: int = 32,
    chunk: int = 100,  # chunk_size
    state_dim: int = 14,  # aloha sim: observation.state (14,), action (14,), one camera, no env state
    action_dim: int = 14,
) -> Layout:
    """lerobot act/modeling_act.py ``ACT.__init__`` (ACTPolicy keeps it as ``model``): ``ACTEncoder`` /
    ``ACTEncoderLayer`` (self_attn, linear1, linear2, norm1, norm2; ``norm`` is Identity without pre_norm),
    ``ACTDecoder`` / ``ACTDecoderLayer`` (self_attn, multihead_attn, linear1, linear2, norm1-3; ``norm``), the
    torchvision resnet18 backbone with FrozenBatchNorm2d wrapped in IntermediateLayerGetter up to layer4, the input
    projections and positional embeddings, and the ``vae_encoder_pos_enc`` buffer."""

    def encoder(prefix: str, layers: int) -> Layout:
        out: Layout = {}
        for i in range(layers):
            p = f"{prefix}.layers.{i}."
            out |= multihead_attention(p + "self_attn", dim)
            out |= linear(p + "linear1", dim, feedforward) | linear(p + "linear2", feedforward, dim)
            out |= affine(p + "norm1", dim) | affine(p + "norm2", dim)
        return out

    out = encoder("model.vae_encoder", vae_encoder_layers)
    out["model.vae_encoder_cls_embed.weight"] = (1, dim)
    out |= linear("model.vae_encoder_robot_state_input_proj", state_dim, dim)
    out |= linear("model.vae_encoder_action_input_proj", action_dim, dim)
    out |= linear("model.vae_encoder_latent_output_proj", dim, 2 * latent_dim)
    out["model.vae_encoder_pos_enc"] = (1, 1 + chunk + 1, dim)  # [cls, state, actions]
    out |= resnet18("model.backbone.", frozen_batch_norm, ("conv1", "bn1", "layer1", "layer2", "layer3", "layer4"))
    out |= encoder("model.encoder", encoder_layers)
    for i in range(decoder_layers):
        p = f"model.decoder.layers.{i}."
        out |= multihead_attention(p + "self_attn", dim) | multihead_attention(p + "multihead_attn", dim)
        out |= linear(p + "linear1", dim, feedforward) | linear(p + "linear2", feedforward, dim)
        out |= affine(p + "norm1", dim) | affine(p + "norm2", dim) | affine(p + "norm3", dim)
    out |= affine("model.decoder.norm", dim)
    out |= linear("model.encoder_robot_state_input_proj", state_dim, dim)
    out |= linear("model.encoder_latent_input_proj", latent_dim, dim)
    out |= conv("model.encoder_img_feat_input_proj", 512, dim, 1, 1)  # resnet18 fc.in_features = 512
    out["model.encoder_1d_feature_pos_embed.weight"] = (2, dim)  # latent + state
    out["model.decoder_pos_embed.weight"] = (chunk, dim)
    return out | linear("model.action_head", dim, action_dim)


def diffusion_layout(
    *,
    down_dims: tuple[int, ...] = (512, 1024, 2048),  # DiffusionConfig defaults
    kernel: int = 5,
    step_embed: int = 128,
    keypoints: int = 32,  # spatial_softmax_num_keypoints
    obs_steps: int = 2,  # n_obs_steps
    state_dim: int = 2,  # pusht: observation.state (2,), action (2,), one 96×96 camera cropped to 84
    action_dim: int = 2,
    cameras: int = 1,
    feature_map: tuple[int, int] = (3, 3),  # resnet18 layer4 of an 84×84 crop
) -> Layout:
    """lerobot diffusion/modeling_diffusion.py (DiffusionPolicy keeps ``DiffusionModel`` as ``diffusion``):
    ``DiffusionRgbEncoder`` (resnet18 children[:-2] as an nn.Sequential, BatchNorm replaced by
    GroupNorm(c // 16, c) with ``use_group_norm``; ``SpatialSoftmax`` with its ``nets`` 1×1 conv and ``pos_grid``
    buffer; ``out``), ``DiffusionConditionalUnet1d`` (diffusion_step_encoder, down/mid/up modules of
    ``DiffusionConditionalResidualBlock1d`` with FiLM scale, final_conv)."""
    out = resnet18("diffusion.rgb_encoder.backbone.", affine, ("0", "1", "4", "5", "6", "7"))
    out |= conv("diffusion.rgb_encoder.pool.nets", 512, keypoints, 1, 1)
    out["diffusion.rgb_encoder.pool.pos_grid"] = (feature_map[0] * feature_map[1], 2)
    out |= linear("diffusion.rgb_encoder.out", 2 * keypoints, 2 * keypoints)
    unet = "diffusion.unet."
    out |= linear(unet + "diffusion_step_encoder.1", step_embed, 4 * step_embed)
    out |= linear(unet + "diffusion_step_encoder.3", 4 * step_embed, step_embed)
    cond_dim = step_embed + (state_dim + 2 * keypoints * cameras) * obs_steps

    def block(name: str, cin: int, cout: int) -> Layout:
        return conv(f"{name}.block.0", cin, cout, kernel) | affine(f"{name}.block.1", cout)

    def residual(name: str, cin: int, cout: int) -> Layout:
        out = block(f"{name}.conv1", cin, cout) | linear(f"{name}.cond_encoder.1", cond_dim, 2 * cout)
        out |= block(f"{name}.conv2", cout, cout)
        return out | (conv(f"{name}.residual_conv", cin, cout, 1) if cin != cout else {})

    in_out = [(action_dim, down_dims[0]), *pairwise(down_dims)]
    for i, (cin, cout) in enumerate(in_out):
        p = f"{unet}down_modules.{i}."
        out |= residual(p + "0", cin, cout) | residual(p + "1", cout, cout)
        if i < len(in_out) - 1:
            out |= conv(p + "2", cout, cout, 3)
    out |= residual(unet + "mid_modules.0", down_dims[-1], down_dims[-1])
    out |= residual(unet + "mid_modules.1", down_dims[-1], down_dims[-1])
    for i, (cout, cin) in enumerate(reversed(in_out[1:])):
        p = f"{unet}up_modules.{i}."
        out |= residual(p + "0", 2 * cin, cout) | residual(p + "1", cout, cout)
        out[p + "2.weight"] = (cout, cout, 4)  # ConvTranspose1d: (in, out, kernel); lerobot's is_last never holds
        out[p + "2.bias"] = (cout,)
    out |= block(unet + "final_conv.0", down_dims[0], down_dims[0])
    return out | conv(unet + "final_conv.1", down_dims[0], action_dim, 1)


# What each real layout leaves out of the replica, and why. Nothing else may be left over.
IGNORED = {
    "smolvla": set(),  # all 500 tensors load, lm_head included (the replica holds SmolVLM's untied LM head)
    "pi0": {"model.paligemma_with_expert.gemma_expert.lm_head.weight"},  # the expert's LM head: emits no tokens
    "pi05": {"model.paligemma_with_expert.gemma_expert.lm_head.weight"},
    "act": {"model.vae_encoder_pos_enc"},  # fixed sinusoid of the CVAE encoder, which inference never runs
    "diffusion-policy": {"diffusion.rgb_encoder.pool.pos_grid"},  # fixed linspace grid, recomputed at call time
}

ANCHORS = json.loads((DATA / "checkpoints" / "lerobot_anchors.json").read_text())["anchors"]
"""What each lerobot tensor IS in the replica, written by hand from both modules (tests/data/checkpoints)."""

# lerobot default layouts, each against the full-size replica of the matching profile.
SOURCE_LAYOUTS: dict[str, Callable[[], Layout]] = {
    "pi0": lambda: paligemma_layout("pi0"),
    "pi05": lambda: paligemma_layout("pi05"),
    "act": act_layout,
    "diffusion-policy": diffusion_layout,
}


def meta_replica(spec: ModelSpec) -> nn.Module:
    with torch.device("meta"):
        return replica_class(spec)(spec)


def assert_accounted(match: KeyMatch, ignored: set[str], anchors: dict[str, str]) -> None:
    """Every replica weight filled with a matching shape; every file tensor loaded or deliberately ignored."""
    assert match.missing == [], f"{len(match.missing)} replica weights no file tensor fills: {match.missing[:20]}"
    assert match.mismatched == [], f"{len(match.mismatched)} shape mismatches: {match.mismatched[:20]}"
    assert match.unexpected == [], (
        f"{len(match.unexpected)} file tensors neither loaded nor in the ignore list: {match.unexpected[:20]}"
    )
    assert set(match.ignored) == ignored
    for key, name in anchors.items():
        assert match.sources.get(name) == key, (name, match.sources.get(name), key)


# ---- SmolVLA: the real file header ----------------------------------------------------------------------------


def test_the_source_transcription_reproduces_the_real_smolvla_header():
    """The helpers that build the π0/π0.5 layouts, checked on the one layout we have a real file for."""
    real = {key: shape for key, (_, shape) in fixture_header().items()}
    built = smolvla_layout()
    assert sorted(set(real) - set(built)) == [] and sorted(set(built) - set(real)) == []
    assert {key: shape for key, shape in built.items() if real[key] != shape} == {}


def test_the_real_smolvla_header_fills_every_replica_weight():
    header = fixture_header()
    assert {dtype for dtype, _ in header.values()} == {"F32"}
    spec = load_model_spec("smolvla")  # lerobot's defaults: 16 VLM layers, 512 px, state/action padded to 32
    match = match_keys(meta_replica(spec), {key: shape for key, (_, shape) in header.items()})
    assert_accounted(match, IGNORED["smolvla"], ANCHORS["smolvla"])
    assert len(match.sources) == len(header) == 500


def write_safetensors(path: Path, header: dict[str, tuple[str, Shape]], values: Callable[[int, str], Tensor]) -> None:
    """A ``model.safetensors`` with exactly ``header``'s names, dtypes and shapes, streamed one tensor at a time;
    ``values(index, key)`` gives a tensor's contents (any shape with the right element count)."""
    entries, offset = {}, 0
    for key, (dtype, shape) in header.items():
        size = math.prod(shape) * DTYPES[dtype].itemsize
        entries[key] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(entries, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with path.open("wb") as file:
        file.write(struct.pack("<Q", len(blob)) + blob)
        for index, (key, (dtype, shape)) in enumerate(header.items()):
            tensor = values(index, key).to(DTYPES[dtype]).reshape(-1).contiguous()
            assert tensor.numel() == math.prod(shape), key
            file.write(tensor.view(torch.uint8).numpy().data)


def test_a_full_size_file_with_the_real_smolvla_header_loads(tmp_path):
    """End to end through ``load_checkpoint``: tensor i of the real header holds the constant i + 1 (exact in fp32),
    the replica starts as NaN; afterwards every replica tensor holds exactly one file tensor's constant, each file
    tensor landed once, and the hand-written anchors hold their lerobot tensor."""
    header = fixture_header()
    keys = list(header)
    file = tmp_path / "model.safetensors"
    try:
        write_safetensors(file, header, lambda index, key: torch.full((math.prod(header[key][1]),), index + 1.0))
        spec = load_model_spec("smolvla")
        model = meta_replica(spec).to_empty(device=CPU)
        with torch.no_grad():
            for tensor in model.state_dict().values():
                tensor.fill_(math.nan)
        report = load_checkpoint(model, tmp_path)
    finally:
        file.unlink(missing_ok=True)
    assert (report.loaded, report.ignored, report.unexpected) == (500, 0, [])
    landed = {}
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            value = tensor.reshape(-1)[0].item()
            assert not math.isnan(value), f"{name} was not filled"
            assert bool((tensor == value).all()), f"{name} holds more than one file tensor"
            landed[name] = keys[int(value) - 1]
    assert sorted(landed.values()) == sorted(keys)
    for key, name in ANCHORS["smolvla"].items():
        assert landed[name] == key


# ---- the other families: layouts read off lerobot's source ------------------------------------------------------


@pytest.mark.parametrize("family", list(SOURCE_LAYOUTS))
def test_lerobot_source_layouts_fill_every_replica_weight(family):
    match = match_keys(meta_replica(load_model_spec(family)), SOURCE_LAYOUTS[family]())
    assert_accounted(match, IGNORED[family], ANCHORS[family])


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_the_pre_4_52_transformers_paligemma_layout_fills_every_replica_weight(family):
    layout = paligemma_layout(family, transformers_layout="<4.52")
    match = match_keys(meta_replica(load_model_spec(family)), layout)
    assert_accounted(match, IGNORED[family], {})
    assert match.sources["language_model.embed_tokens.weight"] == (
        "model.paligemma_with_expert.paligemma.language_model.lm_head.weight"
    )


def tiny_paligemma_layout(spec: ModelSpec) -> Layout:
    """lerobot's π layout (names from its source) at the tiny profile's widths."""
    vision, llm, expert = spec.vision, spec.llm, spec.expert
    assert llm.heads == expert.heads and llm.kv_heads == expert.kv_heads and llm.head_dim == expert.head_dim
    return paligemma_layout(
        spec.family,
        vision_hidden=vision.hidden,
        vision_layers=vision.layers,
        vision_intermediate=vision.intermediate,
        patch=vision.patch_size,
        image=vision.image_size,
        hidden=llm.hidden,
        layers=llm.layers,
        intermediate=llm.intermediate,
        vocab=llm.vocab,
        expert_hidden=expert.hidden,
        expert_intermediate=expert.intermediate,
        heads=llm.heads,
        kv_heads=llm.kv_heads,
        head_dim=llm.head_dim,
        max_dim=spec.action.action_dim,
    )


# lerobot PaliGemmaWithExpertModel.to_bfloat16_for_selected_params: with precision "bfloat16" these stay float32
KEPT_FP32 = ("patch_embedding", "position_embedding", "input_layernorm", "post_attention_layernorm", "model.norm")


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_the_tied_paligemma_embedding_loads_from_lm_head(family, tmp_path):
    """End to end on the tiny π model in lerobot's names (shapes at the tiny widths) and lerobot's bfloat16 dtype mix:
    the input embedding is filled from ``paligemma.lm_head.weight``; when a file also holds ``embed_tokens`` (an
    untied writer), that wins and the LM head is a counted duplicate."""
    spec = load_model_spec(f"{family}-tiny")
    layout = tiny_paligemma_layout(spec)
    assert not any("embed_tokens" in key for key in layout)
    header = {key: ("F32" if any(s in key for s in KEPT_FP32) else "BF16", shape) for key, shape in layout.items()}
    assert {dtype for dtype, _ in header.values()} == {"F32", "BF16"}
    generator = torch.Generator().manual_seed(0)
    contents = {key: torch.randn(math.prod(shape), generator=generator) for key, shape in layout.items()}
    file = tmp_path / "model.safetensors"
    write_safetensors(file, header, lambda _, key: contents[key])
    model = meta_replica(spec).to_empty(device=CPU)
    report = load_checkpoint(model, file)
    assert report.unexpected == [] and report.ignored == len(IGNORED[family])
    lm_head = contents["model.paligemma_with_expert.paligemma.lm_head.weight"].to(torch.bfloat16).float()
    assert torch.equal(model.language_model.embed_tokens.weight.reshape(-1), lm_head)
    norm = "model.paligemma_with_expert.paligemma.model.language_model.norm.weight"
    assert torch.equal(model.language_model.norm.weight, contents[norm])  # an F32 tensor, unrounded

    embed = "model.paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
    header[embed] = header["model.paligemma_with_expert.paligemma.lm_head.weight"]
    contents[embed] = -lm_head
    write_safetensors(file, header, lambda _, key: contents[key])
    report = load_checkpoint(model, file)
    assert report.unexpected == [] and report.ignored == len(IGNORED[family]) + 1
    assert torch.equal(model.language_model.embed_tokens.weight.reshape(-1), -lm_head)
