"""Numerical parity of the replica blocks with the real ``transformers`` modules they mirror.

Every HF module is built from a config class in code (no hub access) at a ``-tiny`` spec's geometry, receives the
replica's randomised weights through a strict ``load_state_dict`` (the replica's parameter names mirror HF's), and
must produce the same fp32 outputs on CPU.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from transformers import (
    DynamicCache,
    GemmaConfig,
    GemmaModel,
    LlamaConfig,
    LlamaModel,
    SiglipVisionConfig,
    SiglipVisionModel,
    SmolVLMConfig,
)
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.smolvlm.modeling_smolvlm import SmolVLMConnector

from tests.support.hf_configs import decoder_geometry
from vlabench.models.replicas.decoder import TextDecoder
from vlabench.models.replicas.flow_vla import ActionExpert, ExpertInputs
from vlabench.models.replicas.layers import AdaptiveRMSNorm, additive_mask, block_mask, rope_cos_sin
from vlabench.models.replicas.vision import PixelShuffleConnector, SiglipVisionTower, pixel_shuffle
from vlabench.models.specs import DecoderSpec, VisionSpec, load_model_spec

ATOL, RTOL = 1e-5, 1e-4
ATTN = "eager"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@torch.no_grad()
def randomize(module: nn.Module, seed: int, std: float = 0.2) -> None:
    """Every parameter ~ N(0, std), norm weights around their identity value, so any mis-mapped tensor shows."""
    generator = torch.Generator().manual_seed(seed)
    for name, param in module.named_parameters():
        noise = torch.randn(param.shape, generator=generator) * std
        is_norm = "norm" in name and "dense" not in name
        if is_norm and name.endswith("weight") and param.detach().abs().sum() > 0:  # LayerNorm / Llama RMSNorm: ~1
            param.copy_(1.0 + noise)
        else:  # Linear, Conv2d, Embedding, biases, Gemma (1 + w) RMSNorm weights, adaRMS dense
            param.copy_(noise)


def load_into(hf: nn.Module, ours: nn.Module, missing: set[str] = frozenset(), unexpected: set[str] = frozenset()):
    """Copy our weights into the HF module and check the key sets differ exactly as expected."""
    result = hf.load_state_dict(ours.state_dict(), strict=not (missing or unexpected))
    assert set(result.missing_keys) == set(missing)
    assert set(result.unexpected_keys) == set(unexpected)
    return hf.eval()


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.shape == expected.shape
    # Guard against vacuous parity (e.g. everything collapsed to zero by a bad mask).
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


# ---- configs ------------------------------------------------------------------------------------------------


def siglip_config(vision: VisionSpec) -> SiglipVisionConfig:
    return SiglipVisionConfig(
        hidden_size=vision.hidden,
        intermediate_size=vision.intermediate,
        num_hidden_layers=vision.layers,
        num_attention_heads=vision.heads,
        image_size=vision.image_size,
        patch_size=vision.patch_size,
        layer_norm_eps=vision.layer_norm_eps,
        hidden_act="gelu_pytorch_tanh",
        vision_use_head=False,
        attn_implementation=ATTN,
    )


def decoder_config(spec: DecoderSpec, vocab: int) -> LlamaConfig | GemmaConfig:
    common = dict(
        **decoder_geometry(spec, vocab),
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        attention_bias=False,
        attn_implementation=ATTN,
    )
    if spec.style == "llama":
        return LlamaConfig(hidden_act="silu", mlp_bias=False, **common)
    return GemmaConfig(hidden_act="gelu_pytorch_tanh", **common)


def hf_decoder(spec: DecoderSpec, vocab: int) -> LlamaModel | GemmaModel:
    config = decoder_config(spec, vocab)
    return (LlamaModel if spec.style == "llama" else GemmaModel)(config)


# ---- a. SigLIP vision tower ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["smolvla-tiny", "pi0-tiny"])
def test_siglip_vision_tower_matches_hf(name: str) -> None:
    vision = load_model_spec(name).vision
    torch.manual_seed(0)
    ours = SiglipVisionTower(vision).eval()
    randomize(ours, seed=1)
    hf = SiglipVisionModel(siglip_config(vision))
    hf = load_into(getattr(hf, "vision_model", hf), ours)  # transformers 5 flattened `.vision_model` away

    pixels = torch.rand(2, 3, vision.image_size, vision.image_size) * 2 - 1
    with torch.no_grad():
        expected = hf(pixels).last_hidden_state
        actual = ours(pixels)
    assert actual.shape == (2, vision.patches_per_camera, vision.hidden)
    assert_close(actual, expected)


# ---- b. SmolVLM pixel-shuffle connector ---------------------------------------------------------------------


def smolvlm_config(vision: VisionSpec, llm_hidden: int) -> SmolVLMConfig:
    return SmolVLMConfig(
        vision_config={
            "hidden_size": vision.hidden,
            "intermediate_size": vision.intermediate,
            "num_hidden_layers": vision.layers,
            "num_attention_heads": vision.heads,
            "image_size": vision.image_size,
            "patch_size": vision.patch_size,
        },
        text_config={"model_type": "llama", "hidden_size": llm_hidden, "vocab_size": 64},
        scale_factor=vision.pixel_shuffle_factor,
    )


def test_pixel_shuffle_connector_matches_hf() -> None:
    spec = load_model_spec("smolvla-tiny")
    vision = spec.vision
    ours = PixelShuffleConnector(vision, spec.llm.hidden).eval()
    randomize(ours, seed=2)
    hf = load_into(SmolVLMConnector(smolvlm_config(vision, spec.llm.hidden)), ours)

    features = torch.randn(3, vision.patches_per_camera, vision.hidden)
    with torch.no_grad():
        expected = hf(features)
        actual = ours(features)
    assert actual.shape == (3, vision.tokens_per_camera, spec.llm.hidden)
    assert_close(actual, expected)


@pytest.mark.parametrize(("seq", "dim", "factor"), [(1024, 768, 4), (64, 8, 2), (16, 3, 4)])
def test_pixel_shuffle_is_hf_permutation(seq: int, dim: int, factor: int) -> None:
    """A pure permutation: must equal HF's bit for bit (first case is the full SmolVLA geometry: 1024 -> 64)."""
    full = load_model_spec("smolvla").vision
    assert (full.patches_per_camera, full.hidden, full.pixel_shuffle_factor, full.tokens_per_camera) == (
        1024,
        768,
        4,
        64,
    )
    x = torch.arange(seq * dim, dtype=torch.float32).reshape(1, seq, dim)  # distinct values: any misplacement shows
    actual = pixel_shuffle(x, factor)
    expected = SmolVLMConnector.pixel_shuffle(None, x, factor)  # does not touch `self`
    assert actual.shape == (1, seq // factor**2, dim * factor**2)
    assert torch.equal(actual, expected)


# ---- c. language model ------------------------------------------------------------------------------------


def causal_inputs(spec: DecoderSpec, batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    positions = torch.arange(seq)[None].expand(batch, -1)
    cos, sin = rope_cos_sin(positions, spec.head_dim, spec.rope_theta, torch.float32)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril().expand(batch, -1, -1)
    return cos, sin, additive_mask(causal, torch.float32)


@pytest.mark.parametrize("name", ["smolvla-tiny", "pi0-tiny"])
def test_text_decoder_matches_hf(name: str) -> None:
    llm = load_model_spec(name).llm
    torch.manual_seed(0)
    ours = TextDecoder(llm).eval()
    randomize(ours, seed=3)
    # lm_head (untied SmolLM2 head) lives in *ForCausalLM, not in the base model.
    extra = set() if llm.tie_embeddings else {"lm_head.weight"}
    hf = load_into(hf_decoder(llm, llm.vocab), ours, unexpected=extra)

    batch, seq = 2, 11
    embeds = torch.randn(batch, seq, llm.hidden)
    cos, sin, bias = causal_inputs(llm, batch, seq)
    with torch.no_grad():
        # transformers 5 GemmaModel does NOT rescale `inputs_embeds` (the sqrt(hidden) factor moved into its
        # GemmaTextScaledWordEmbedding); both sides therefore get the same embeddings here.
        out = hf(inputs_embeds=embeds, use_cache=True)
        hidden, keys, values = ours(embeds, cos, sin, bias)
    assert_close(hidden, out.last_hidden_state)
    cache = out.cache
    assert isinstance(cache, DynamicCache)
    assert len(cache.layers) == len(keys) == llm.layers
    for layer, k, v in zip(cache.layers, keys, values, strict=True):
        assert k.shape == (batch, llm.kv_heads, seq, llm.head_dim)
        assert_close(k, layer.keys)
        assert_close(v, layer.values)


def test_gemma_token_embedding_scale_matches_hf() -> None:
    """The prefill embeds language as ``embed_tokens(ids) * sqrt(hidden)``: exactly HF GemmaModel's input_ids path."""
    llm = load_model_spec("pi0-tiny").llm
    ours = TextDecoder(llm).eval()
    randomize(ours, seed=4)
    hf = load_into(hf_decoder(llm, llm.vocab), ours)

    ids = torch.randint(0, llm.vocab, (1, 9))
    cos, sin, bias = causal_inputs(llm, 1, 9)
    with torch.no_grad():
        expected = hf(input_ids=ids).last_hidden_state
        actual, _, _ = ours(ours.embed_tokens(ids) * math.sqrt(llm.hidden), cos, sin, bias)
    assert_close(actual, expected)


# ---- d. π0 joint-attention expert ----------------------------------------------------------------------------


def test_pi0_expert_joint_attention_matches_hf_gemma_with_prefix_cache() -> None:
    spec = load_model_spec("pi0-tiny")
    expert_spec = spec.expert
    torch.manual_seed(0)
    ours = ActionExpert(spec).eval()
    assert not any(layer.cross or layer.adaptive for layer in ours.layers)
    randomize(ours, seed=5)
    # The expert reads its inputs as embeddings: HF's token embedding is the only key ours lacks.
    hf = load_into(hf_decoder(expert_spec, vocab=8), ours, missing={"embed_tokens.weight"})

    batch, prefix_len, suffix_len = 2, 13, 1 + 6  # prefix K/V as from the LLM; suffix = state token + actions
    shape = (expert_spec.layers, batch, spec.llm.kv_heads, prefix_len, spec.llm.head_dim)
    prefix_k, prefix_v = torch.randn(shape), torch.randn(shape)
    # Realistic π0 mask: padded prefix tail is invisible, state token sees only itself, actions see everything.
    prefix_valid = torch.ones(batch, prefix_len, dtype=torch.bool)
    prefix_valid[1, -4:] = False
    suffix_blocks = torch.tensor([1] + [2] * (suffix_len - 1)).expand(batch, -1)
    allowed = torch.cat(
        [
            prefix_valid[:, None, :].expand(batch, suffix_len, -1),
            block_mask(suffix_blocks, suffix_blocks, torch.ones(batch, suffix_len, dtype=torch.bool)),
        ],
        dim=2,
    )
    bias = additive_mask(allowed, torch.float32)  # (B, 1, suffix, prefix + suffix)
    positions = prefix_valid.long().sum(1, keepdim=True) + torch.arange(suffix_len)[None]
    suffix = torch.randn(batch, suffix_len, expert_spec.hidden)

    cache = DynamicCache(config=hf.config)
    for index in range(expert_spec.layers):
        cache.update(prefix_k[index], prefix_v[index], index)
    assert cache.get_seq_length() == prefix_len

    cos, sin = rope_cos_sin(positions, expert_spec.head_dim, spec.llm.rope_theta, torch.float32)
    inputs = ExpertInputs(
        rope=(cos, sin), bias=bias, cross_rope=(cos, sin), cross_bias=bias[..., :prefix_len], cond=None
    )
    with torch.no_grad():
        # transformers 5 GemmaModel does not rescale inputs_embeds, so both sides get `suffix` unscaled.
        out = hf(inputs_embeds=suffix, attention_mask=bias, position_ids=positions, cache=cache, use_cache=True)
        h = suffix
        for index, layer in enumerate(ours.layers):
            h = layer(h, prefix_k[index], prefix_v[index], inputs)
        actual = ours.norm(h)
    assert_close(actual, out.last_hidden_state)
    # HF appended the expert's own post-RoPE K/V after the prefix; the prefix part must be untouched.
    assert out.cache.layers[0].keys.shape[2] == prefix_len + suffix_len
    assert torch.equal(out.cache.layers[0].keys[:, :, :prefix_len], prefix_k[0])


def test_pi0_expert_full_visibility_matches_hf() -> None:
    """Simplest joint-attention check: every suffix token sees every prefix and suffix token."""
    spec = load_model_spec("pi0-tiny")
    expert_spec = spec.expert
    ours = ActionExpert(spec).eval()
    randomize(ours, seed=6)
    hf = load_into(hf_decoder(expert_spec, vocab=8), ours, missing={"embed_tokens.weight"})

    batch, prefix_len, suffix_len = 1, 10, 5
    shape = (expert_spec.layers, batch, spec.llm.kv_heads, prefix_len, spec.llm.head_dim)
    prefix_k, prefix_v = torch.randn(shape), torch.randn(shape)
    bias = torch.zeros(batch, 1, suffix_len, prefix_len + suffix_len)
    positions = prefix_len + torch.arange(suffix_len)[None]
    suffix = torch.randn(batch, suffix_len, expert_spec.hidden)
    cache = DynamicCache(ddp_cache_data=list(zip(prefix_k, prefix_v, strict=True)), config=hf.config)

    cos, sin = rope_cos_sin(positions, expert_spec.head_dim, spec.llm.rope_theta, torch.float32)
    inputs = ExpertInputs(
        rope=(cos, sin), bias=bias, cross_rope=(cos, sin), cross_bias=bias[..., :prefix_len], cond=None
    )
    with torch.no_grad():
        expected = hf(inputs_embeds=suffix, attention_mask=bias, position_ids=positions, cache=cache).last_hidden_state
        h = suffix
        for index, layer in enumerate(ours.layers):
            h = layer(h, prefix_k[index], prefix_v[index], inputs)
    assert_close(ours.norm(h), expected)


# ---- e. π0.5 adaRMSNorm -------------------------------------------------------------------------------------


def test_adaptive_rmsnorm_with_zero_dense_is_gemma_rmsnorm() -> None:
    dim, cond_dim, eps = 32, 24, 1e-6
    ours = AdaptiveRMSNorm(dim, cond_dim, eps)
    with torch.no_grad():
        ours.dense.weight.zero_()
        ours.dense.bias.zero_()
    reference = GemmaRMSNorm(dim, eps=eps)
    with torch.no_grad():
        reference.weight.zero_()
    x, cond = torch.randn(2, 7, dim) * 3, torch.randn(2, cond_dim)
    with torch.no_grad():
        out, gate = ours(x, cond)
        expected = reference(x)
    assert_close(out, expected)
    assert gate.shape == (2, 1, dim)
    assert torch.equal(gate, torch.zeros_like(gate))


def test_adaptive_rmsnorm_matches_lerobot_formula() -> None:
    # Re-statement of lerobot's PiGemmaRMSNorm.forward (huggingface/lerobot src/lerobot/policies/pi_gemma.py):
    #   normed = x * rsqrt(mean(x^2) + eps); scale, shift, gate = dense(cond)[:, None].chunk(3, -1)
    #   return normed * (1 + scale) + shift, gate     (used as residual + out * gate)
    dim, cond_dim, eps = 32, 24, 1e-6
    ours = AdaptiveRMSNorm(dim, cond_dim, eps)
    randomize(ours, seed=7)
    assert ours.dense.bias.abs().sum() > 0
    x, cond = torch.randn(2, 7, dim) * 3, torch.randn(2, cond_dim)
    with torch.no_grad():
        out, gate = ours(x, cond)
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        modulation = cond @ ours.dense.weight.T + ours.dense.bias
        scale, shift, expected_gate = modulation[:, None].chunk(3, dim=-1)
        expected = normed * (1 + scale) + shift
    assert_close(out, expected)
    assert_close(gate, expected_gate)
