"""Spec-level behaviour: published parameter counts, token geometry, tiny variants, input errors, seeding."""

from __future__ import annotations

from functools import cache

import pytest
import torch
import yaml

from vlabench.errors import InputError
from vlabench.models.replicas import FlowMatchingVLA, Observation, build_replica, count_parameters
from vlabench.models.specs import FlowVLASpec, ModelSpec, load_model_spec, model_names, parse_model_spec

FLOW = [name for name in model_names() if isinstance(load_model_spec(name), FlowVLASpec)]  # the other families:
FULL = [name for name in FLOW if load_model_spec(name).reference is not None]  # test_model_zoo.py,
TINY = [name for name in FLOW if load_model_spec(name).variant_of is not None]  # test_visuomotor.py
CPU = torch.device("cpu")


def test_every_family_has_a_full_and_a_tiny_model() -> None:
    assert set(FULL) >= {"smolvla", "pi0", "pi05"}
    assert {load_model_spec(name).variant_of for name in TINY} == set(FULL)


@cache
def meta_model(name: str) -> FlowMatchingVLA:
    with torch.device("meta"):
        return FlowMatchingVLA(load_model_spec(name))


def param_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---- parameter counts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FULL)
def test_parameter_count_matches_published_reference(name: str) -> None:
    spec = load_model_spec(name)
    count = count_parameters(spec)
    assert count == pytest.approx(spec.reference.params, rel=0.02)


def test_count_parameters_allocates_nothing_and_equals_a_real_build() -> None:
    spec = load_model_spec("smolvla-tiny")
    model = build_replica(spec, seed=0, dtype=torch.float32, device=CPU)
    assert count_parameters(spec) == param_count(model)
    assert all(p.device.type == "meta" for p in meta_model("pi0").parameters())


# models.md §5 (transformers config classes built offline): SmolVLM2 vision 86.4M, connector 11.8M, SmolVLA
# expert ≈98.2M (lerobot's odd-layer k/v read the 320-wide cached K/V, not the 720-wide hidden); PaliGemma vision
# 412.4M, Gemma-2B text incl. embedding 2508.5M, Gemma-300M expert without embedding 311.5M.
COMPONENTS = [
    ("smolvla", "vision_tower", 86.4e6),
    ("smolvla", "connector", 11.8e6),
    ("smolvla", "expert", 98.2e6),
    ("pi0", "vision_tower", 412.4e6),
    ("pi0", "language_model", 2508.5e6),
    ("pi0", "expert", 311.5e6),
]


@pytest.mark.parametrize(("name", "component", "expected"), COMPONENTS)
def test_component_parameter_counts(name: str, component: str, expected: float) -> None:
    assert param_count(getattr(meta_model(name), component)) == pytest.approx(expected, rel=0.005)


def test_pi05_expert_grows_by_adarms_only() -> None:
    """π0.5 = π0 with adaRMS dense layers (3·width outputs) in place of the expert's RMSNorm weights."""
    pi0, pi05 = meta_model("pi0"), meta_model("pi05")
    spec = load_model_spec("pi05").expert
    norms = 2 * spec.layers + 1
    dense = spec.hidden * 3 * spec.hidden + 3 * spec.hidden
    assert param_count(pi0.vision_tower) == param_count(pi05.vision_tower)
    assert param_count(pi0.language_model) == param_count(pi05.language_model)
    assert param_count(pi05.expert) - param_count(pi0.expert) == norms * (dense - spec.hidden)


# ---- token geometry -----------------------------------------------------------------------------------------


def expected_prefix(spec: ModelSpec, cameras: int) -> int:
    state_token = int(spec.action.state_placement == "prefix_token")
    return cameras * spec.vision.tokens_per_camera + spec.language_tokens + state_token


@pytest.mark.parametrize(("cameras", "prefix"), [(1, 113), (2, 177), (3, 241)])
def test_smolvla_geometry(cameras: int, prefix: int) -> None:
    spec = load_model_spec("smolvla")
    assert spec.vision.tokens_per_camera == 64
    assert expected_prefix(spec, cameras) == 64 * cameras + 48 + 1 == prefix


@pytest.mark.parametrize(("name", "prefix"), [("pi0", 816), ("pi05", 968)])
def test_pi_geometry(name: str, prefix: int) -> None:
    spec = load_model_spec(name)
    assert spec.vision.tokens_per_camera == 256
    assert spec.cameras == 3
    assert spec.action.state_placement != "prefix_token"
    assert expected_prefix(spec, spec.cameras) == prefix


def observation(spec: ModelSpec, cameras: int, batch: int = 1, seed: int = 0) -> Observation:
    generator = torch.Generator().manual_seed(seed)
    size, length = spec.vision.image_size, spec.language_tokens
    return Observation(
        images=torch.rand(batch, cameras, 3, size, size, generator=generator) * 2 - 1,
        language_tokens=torch.randint(0, spec.llm.vocab, (batch, length), generator=generator),
        language_mask=(torch.arange(length) < length - length // 4).expand(batch, -1),
        state=torch.randn(batch, spec.action.state_dim, generator=generator),
    )


@pytest.fixture(scope="module")
def tiny_models() -> dict[str, FlowMatchingVLA]:
    return {name: build_replica(load_model_spec(name), seed=0, dtype=torch.float32, device=CPU) for name in TINY}


@pytest.mark.parametrize("name", TINY)
def test_tiny_prefix_length_and_cache_shapes(name: str, tiny_models: dict[str, FlowMatchingVLA]) -> None:
    spec, model = load_model_spec(name), tiny_models[name]
    for cameras, batch in [(spec.cameras, 1), (1, 2)]:
        obs = observation(spec, cameras, batch)
        with torch.no_grad():
            image_tokens = model.embed_images(obs.images)
            cache = model.prefill(obs, image_tokens)
        assert image_tokens.shape == (batch, cameras * spec.vision.tokens_per_camera, spec.llm.hidden)
        prefix = expected_prefix(spec, cameras)
        kv_shape = (spec.llm.layers, batch, spec.llm.kv_heads, prefix, spec.llm.head_dim)
        assert cache.keys.shape == kv_shape
        assert cache.values.shape == kv_shape
        assert cache.valid.shape == (batch, prefix)
        assert int(cache.valid.sum()) == batch * (prefix - spec.language_tokens // 4)
        assert torch.isfinite(cache.keys).all()
        assert torch.isfinite(cache.values).all()


@pytest.mark.parametrize("name", TINY)
def test_tiny_denoise_step_shape_and_finite(name: str, tiny_models: dict[str, FlowMatchingVLA]) -> None:
    spec, model = load_model_spec(name), tiny_models[name]
    obs = observation(spec, spec.cameras)
    x_t = torch.randn(1, spec.action.chunk, spec.action.action_dim)
    with torch.no_grad():
        cache = model.prefix(obs)
        velocity = model.denoise_step(x_t, torch.tensor([1.0]), cache)
        later = model.denoise_step(x_t, torch.tensor([0.3]), cache)
    assert velocity.shape == (1, spec.action.chunk, spec.action.action_dim)
    assert torch.isfinite(velocity).all()
    assert velocity.abs().max() > 0
    assert not torch.equal(velocity, later), "the flow time must condition the expert"


def later_action_influence(model: FlowMatchingVLA, spec: ModelSpec) -> float:
    """How much perturbing the last noisy action moves the velocity predicted for the earlier actions."""
    generator = torch.Generator().manual_seed(3)
    x_t = torch.randn(1, spec.action.chunk, spec.action.action_dim, generator=generator)
    perturbed = x_t.clone()
    perturbed[:, -1] += 1.0
    t = torch.tensor([0.5])
    with torch.no_grad():
        cache = model.prefix(observation(spec, spec.cameras))
        change = model.denoise_step(perturbed, t, cache) - model.denoise_step(x_t, t, cache)
    assert change[:, -1].abs().max() > 0
    return float(change[:, :-1].abs().max())


@pytest.mark.parametrize("name", ["pi0-tiny", "pi05-tiny"])
def test_pi_action_tokens_attend_bidirectionally(name: str, tiny_models: dict[str, FlowMatchingVLA]) -> None:
    # openpi / lerobot pi0 & pi05 embed_suffix: att_masks += [1] + [0] * (chunk_size - 1): one block of actions.
    assert later_action_influence(tiny_models[name], load_model_spec(name)) > 0


def test_smolvla_action_tokens_attend_causally(tiny_models: dict[str, FlowMatchingVLA]) -> None:
    # lerobot modeling_smolvla.py embed_suffix: att_masks += [1] * chunk_size: each action is its own block.
    assert later_action_influence(tiny_models["smolvla-tiny"], load_model_spec("smolvla-tiny")) == 0


# ---- tiny variants ----------------------------------------------------------------------------------------


STRUCTURE = [
    lambda s: s.family,
    lambda s: s.expert.attention,
    lambda s: s.expert.self_attn_every,
    lambda s: s.expert.time_conditioning,
    lambda s: s.action.state_placement,
    lambda s: s.vision.connector,
    lambda s: s.llm.style,
    lambda s: s.expert.style,
    lambda s: s.action.chunk,
    lambda s: s.action.steps,
    lambda s: s.action.action_attention,
    lambda s: s.vision.scale_embeddings,
]


CHUNK = STRUCTURE[8]  # a workload knob (--chunk) a policy trained for a benchmark chose for it


@pytest.mark.parametrize("name", TINY)
def test_tiny_variant_keeps_structure(name: str) -> None:
    tiny = load_model_spec(name)
    full = load_model_spec(tiny.variant_of)
    kept = [field for field in STRUCTURE if tiny.trained is None or field is not CHUNK]
    assert tiny.reference is None
    assert [field(tiny) for field in kept] == [field(full) for field in kept]
    assert count_parameters(tiny) < count_parameters(full) / 100


# ---- malformed input ----------------------------------------------------------------------------------------


def tiny_yaml_data() -> dict:
    return load_model_spec("smolvla-tiny").model_dump(mode="json")


def test_round_trip_is_valid() -> None:
    spec = parse_model_spec(yaml.safe_dump(tiny_yaml_data()), "x.yaml")
    assert spec == load_model_spec("smolvla-tiny")


@pytest.mark.parametrize("text", ["a: [", "", "- 1\n- 2", "name: [unclosed"])
def test_malformed_yaml_is_input_error(text: str) -> None:
    with pytest.raises(InputError, match=r"x\.yaml"):
        parse_model_spec(text, "x.yaml")


def test_missing_field_is_input_error() -> None:
    data = tiny_yaml_data()
    del data["action"]
    with pytest.raises(InputError, match="action"):
        parse_model_spec(yaml.safe_dump(data), "x.yaml")


def test_heads_not_divisible_by_kv_heads_is_input_error() -> None:
    data = tiny_yaml_data()
    data["llm"]["kv_heads"] = 3  # 4 heads
    with pytest.raises(InputError, match="kv_heads"):
        parse_model_spec(yaml.safe_dump(data), "x.yaml")


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(unknown_key=1),  # extra fields are forbidden
        lambda d: d["vision"].update(pixel_shuffle_factor=3),  # 8x8 grid not divisible by 3
        lambda d: d["expert"].update(layers=3),  # expert must mirror the kept LLM layers
        lambda d: d.update(reference={"params": 1, "source": "x"}),  # both reference and variant_of
        lambda d: d["action"].update(chunk=0),
    ],
)
def test_invalid_spec_is_input_error(edit) -> None:
    data = tiny_yaml_data()
    edit(data)
    with pytest.raises(InputError):
        parse_model_spec(yaml.safe_dump(data), "x.yaml")


def test_unknown_model_suggests_closest() -> None:
    with pytest.raises(InputError, match="Did you mean 'smolvla'"):
        load_model_spec("smolvl")


# ---- seeded weights ---------------------------------------------------------------------------------------


def test_seeded_weights_are_deterministic() -> None:
    spec = load_model_spec("pi05-tiny")
    first, again, other = (build_replica(spec, seed, torch.float32, CPU).state_dict() for seed in (7, 7, 8))
    assert first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[key], again[key]) for key in first)
    differing = [key for key in first if not torch.equal(first[key], other[key])]
    assert differing
    assert all(key.endswith(".weight") for key in differing)
