"""ACT and Diffusion Policy replicas: parameter counts, phase shapes, determinism, conditioning, lerobot's
state-dict layout and ONNX export of every phase."""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import fields

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from vlabench.models.replicas import build_replica, count_parameters, replica_class
from vlabench.models.replicas.act import ActMemory, ACTPolicy, sinusoidal_2d
from vlabench.models.replicas.diffusion_policy import DiffusionPolicy, GlobalCondition, SpatialSoftmax
from vlabench.models.replicas.flow_vla import Observation
from vlabench.models.replicas.resnet import FrozenBatchNorm2d
from vlabench.models.specs import load_model_spec

CPU = torch.device("cpu")
# torchvision resnet18: 11,689,512 parameters, of which fc (512 → 1000) holds 513,000.
RESNET18_WITHOUT_FC = 11_689_512 - 513_000


def observation(spec, seed: int = 0, device: torch.device = CPU, batch: int = 1) -> Observation:
    """A seeded observation in the families' layout: cameras × frames images (frame-major), frames × state."""
    generator = torch.Generator().manual_seed(seed)
    height, width = spec.image_shape
    images = torch.rand(batch, spec.cameras * spec.frames, 3, height, width, generator=generator) * 2 - 1
    state = torch.randn(batch, spec.frames * spec.action.state_dim, generator=generator)
    return Observation(
        images=images.to(device),
        language_tokens=torch.zeros(batch, spec.language_tokens, dtype=torch.long, device=device),
        language_mask=torch.ones(batch, spec.language_tokens, dtype=torch.bool, device=device),
        state=state.to(device),
    )


def noise(spec, seed: int = 1, device: torch.device = CPU) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, spec.action.chunk, spec.action.action_dim, generator=generator).to(device)


def tiny(name: str, seed: int = 0) -> nn.Module:
    return build_replica(load_model_spec(name), seed, torch.float32, CPU)


@torch.no_grad()
def infer(model: nn.Module, obs: Observation, x_t: Tensor, t: float = 5.0) -> tuple[Tensor, object, Tensor]:
    """Image tokens, cache and one action-head output."""
    tokens = model.embed_images(obs.images)
    cache = model.prefill(obs, tokens)
    return tokens, cache, model.denoise_step(x_t, torch.full((x_t.shape[0],), t, device=x_t.device), cache)


# ---------------------------------------------------------------- parameter counts


@pytest.mark.parametrize("name", ["act", "diffusion-policy"])
def test_parameter_count_matches_the_reference(name: str) -> None:
    spec = load_model_spec(name)
    params = count_parameters(spec)
    assert abs(params - spec.reference.params) <= spec.reference.tolerance * spec.reference.params


def test_component_counts_match_torchvision_and_lerobot_defaults() -> None:
    with torch.device("meta"):
        act = ACTPolicy(load_model_spec("act"))
        dp = DiffusionPolicy(load_model_spec("diffusion-policy"))

    def count(module: nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    assert count(act.backbone) == RESNET18_WITHOUT_FC
    # GroupNorm(C/16) has the same affine parameters as BatchNorm; SpatialSoftmax + out add 512·32+32 + 64·64+64.
    assert count(dp.rgb_encoder) == RESNET18_WITHOUT_FC + 512 * 32 + 32 + 64 * 64 + 64
    # One post-norm layer at 512 wide, MLP 3200: 4·512² + 4·512 attention + 2·512·3200 + 3200 + 512 MLP + 2 norms.
    layer = 4 * 512**2 + 4 * 512 + 2 * 512 * 3200 + 3200 + 512 + 4 * 512
    assert count(act.encoder) == 4 * layer
    assert count(act.vae_encoder) == 4 * layer
    assert count(act.decoder) == layer + 4 * 512**2 + 4 * 512 + 2 * 512 + 2 * 512  # + cross-attention, norm3, norm
    assert 240e6 < count(dp.unet) < 260e6  # models.md: UNet ≈ 250M (estimate)


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    ("name", "tokens", "cache", "out"),
    [
        ("act", (1, 300, 512), {"memory": (1, 302, 512), "memory_pos": (1, 302, 512)}, (1, 100, 14)),
        ("diffusion-policy", (1, 2, 64), {"cond": (1, 2 * (2 + 64))}, (1, 16, 2)),
    ],
)
def test_full_size_phase_shapes_on_meta(name: str, tokens: tuple, cache: dict, out: tuple) -> None:
    spec = load_model_spec(name)
    meta = torch.device("meta")
    with meta:
        model = replica_class(spec)(spec).eval()
    image_tokens, prefix, actions = infer(model, observation(spec, device=meta), noise(spec, device=meta))
    assert tuple(image_tokens.shape) == tokens
    assert tokens[1] == spec.prefix_tokens(spec.cameras) - (2 if name == "act" else 0)
    assert {field.name: tuple(getattr(prefix, field.name).shape) for field in fields(prefix)} == cache
    assert tuple(actions.shape) == out


@pytest.mark.parametrize(
    ("name", "cache_type", "tokens", "out"),
    [
        ("act-tiny", ActMemory, (1, 2 * 4, 32), (1, 10, 14)),
        ("diffusion-policy-tiny", GlobalCondition, (1, 2 * 2, 16), (1, 16, 2)),
    ],
)
def test_tiny_phase_shapes_and_a_whole_inference(name, cache_type, tokens, out) -> None:
    spec = load_model_spec(name)
    model = tiny(name)
    obs, x_t = observation(spec), noise(spec)
    image_tokens, cache, actions = infer(model, obs, x_t)
    assert isinstance(cache, cache_type)
    assert all(isinstance(getattr(cache, field.name), Tensor) for field in fields(cache))
    assert tuple(image_tokens.shape) == tokens
    assert tuple(actions.shape) == out
    assert torch.isfinite(actions).all()


# ---------------------------------------------------------------- determinism and conditioning


@pytest.mark.parametrize("name", ["act-tiny", "diffusion-policy-tiny"])
def test_weights_and_outputs_follow_the_seed(name: str) -> None:
    spec = load_model_spec(name)
    obs, x_t = observation(spec), noise(spec)
    first, again, other = (infer(tiny(name, seed), obs, x_t)[2] for seed in (0, 0, 1))
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)


def test_diffusion_unet_depends_on_timestep_and_condition() -> None:
    spec = load_model_spec("diffusion-policy-tiny")
    model = tiny("diffusion-policy-tiny")
    obs, x_t = observation(spec), noise(spec)
    _, cache, eps = infer(model, obs, x_t, t=5.0)
    with torch.no_grad():
        other_t = model.denoise_step(x_t, torch.full((1,), 6.0), cache)
        other_cond = model.denoise_step(x_t, torch.full((1,), 5.0), GlobalCondition(cond=cache.cond + 1.0))
        other_x = model.denoise_step(x_t + 1.0, torch.full((1,), 5.0), cache)
    assert not torch.allclose(eps, other_t, atol=1e-6)
    assert not torch.allclose(eps, other_cond, atol=1e-6)
    assert not torch.allclose(eps, other_x, atol=1e-6)


def test_diffusion_condition_is_state_then_cameras_per_frame() -> None:
    spec = load_model_spec("diffusion-policy-tiny")
    model = tiny("diffusion-policy-tiny")
    obs = observation(spec)
    tokens, cache, _ = infer(model, obs, noise(spec))
    state_dim, per_frame = spec.action.state_dim, spec.cameras * spec.feature_dim
    assert cache.cond.shape[1] == spec.global_cond_dim(spec.cameras)
    rows = cache.cond.reshape(1, spec.frames, state_dim + per_frame)
    assert torch.equal(rows[..., :state_dim], obs.state.reshape(1, spec.frames, state_dim))
    assert torch.equal(rows[:, 1, state_dim:], tokens[:, spec.cameras :].flatten(1))  # frame 1: its cameras


def test_diffusion_images_are_center_cropped() -> None:
    spec = load_model_spec("diffusion-policy-tiny")
    model = tiny("diffusion-policy-tiny")
    images = observation(spec).images
    border = images.clone()
    border[..., :4, :] = 0.5  # the 64 → 56 crop drops 4 rows and columns on each side
    inside = images.clone()
    inside[..., 32, 32] = -images[..., 32, 32]
    with torch.no_grad():
        reference = model.embed_images(images)
        assert torch.equal(model.embed_images(border), reference)
        assert not torch.allclose(model.embed_images(inside), reference)


def test_act_actions_depend_on_image_and_state() -> None:
    spec = load_model_spec("act-tiny")
    model = tiny("act-tiny")
    obs, x_t = observation(spec), noise(spec)
    _, _, actions = infer(model, obs, x_t)
    other_image = Observation(obs.images.flip(-1), obs.language_tokens, obs.language_mask, obs.state)
    other_state = Observation(obs.images, obs.language_tokens, obs.language_mask, obs.state + 1.0)
    assert not torch.allclose(infer(model, other_image, x_t)[2], actions, atol=1e-6)
    assert not torch.allclose(infer(model, other_state, x_t)[2], actions, atol=1e-6)
    # single pass: the head reads neither x_t nor t
    assert torch.equal(infer(model, obs, torch.randn_like(x_t), t=0.0)[2], actions)


def test_act_image_tokens_are_camera_by_camera() -> None:
    spec = load_model_spec("act-tiny")
    model = tiny("act-tiny")
    images = observation(spec).images
    changed = images.clone()
    changed[:, 1] = -changed[:, 1]
    per_camera = spec.tokens_per_camera
    with torch.no_grad():
        before, after = model.embed_images(images), model.embed_images(changed)
    assert torch.equal(before[:, :per_camera], after[:, :per_camera])
    assert not torch.allclose(before[:, per_camera:], after[:, per_camera:])


def test_frozen_batch_norm_uses_running_statistics_in_training_mode() -> None:
    norm = FrozenBatchNorm2d(4).train()
    x = torch.randn(2, 4, 3, 3) * 5 + 3
    assert torch.allclose(norm(x), x / math.sqrt(1 + norm.eps))
    assert "num_batches_tracked" not in norm.state_dict()


# ---------------------------------------------------------------- lerobot's positional tables


def test_act_2d_sinusoid_matches_lerobot() -> None:
    """lerobot ACTSinusoidalPositionEmbedding2d, transcribed (cumsum over a ones mask, interleaved sin/cos)."""
    height, width, hidden = 3, 5, 16
    dimension = hidden // 2
    not_mask = torch.ones(1, height, width)
    y_range = not_mask.cumsum(1, dtype=torch.float32)
    x_range = not_mask.cumsum(2, dtype=torch.float32)
    y_range = y_range / (y_range[:, -1:, :] + 1e-6) * 2 * math.pi
    x_range = x_range / (x_range[:, :, -1:] + 1e-6) * 2 * math.pi
    inverse_frequency = 10000 ** (2 * (torch.arange(dimension, dtype=torch.float32) // 2) / dimension)
    x_range = x_range.unsqueeze(-1) / inverse_frequency
    y_range = y_range.unsqueeze(-1) / inverse_frequency
    pos_x = torch.stack((x_range[..., 0::2].sin(), x_range[..., 1::2].cos()), dim=-1).flatten(3)
    pos_y = torch.stack((y_range[..., 0::2].sin(), y_range[..., 1::2].cos()), dim=-1).flatten(3)
    expected = torch.cat((pos_y, pos_x), dim=3).reshape(height * width, hidden)  # "(h w) c"
    assert torch.allclose(sinusoidal_2d(height, width, hidden, CPU), expected, atol=1e-6)


def test_spatial_softmax_grid_matches_lerobot() -> None:
    height, width = 3, 4
    pos_x, pos_y = np.meshgrid(np.linspace(-1.0, 1.0, width), np.linspace(-1.0, 1.0, height))
    expected = np.concatenate([pos_x.reshape(-1, 1), pos_y.reshape(-1, 1)], axis=1)
    grid = SpatialSoftmax(8, 2, (height, width)).pos_grid(torch.float32, CPU)
    assert torch.allclose(grid, torch.from_numpy(expected).float(), atol=1e-7)


# ---------------------------------------------------------------- lerobot state-dict layout

# Keys read off lerobot's modules (modeling_act.py v0.4.1, modeling_diffusion.py v0.4.3 and torchvision resnet18).
LEROBOT_KEYS = {
    "act": {
        "model.backbone.conv1.weight": None,
        "model.backbone.bn1.running_var": (64,),
        "model.backbone.layer2.0.downsample.0.weight": (128, 64, 1, 1),
        "model.backbone.layer4.0.conv1.weight": (512, 256, 3, 3),
        "model.backbone.layer4.1.bn2.bias": (512,),
        "model.encoder.layers.0.self_attn.in_proj_weight": (1536, 512),
        "model.encoder.layers.3.linear1.weight": (3200, 512),
        "model.encoder.layers.3.norm2.bias": (512,),
        "model.decoder.layers.0.multihead_attn.out_proj.weight": (512, 512),
        "model.decoder.layers.0.norm3.weight": (512,),
        "model.decoder.norm.weight": (512,),
        "model.vae_encoder.layers.3.self_attn.in_proj_bias": (1536,),
        "model.vae_encoder_cls_embed.weight": (1, 512),
        "model.vae_encoder_robot_state_input_proj.weight": (512, 14),
        "model.vae_encoder_action_input_proj.weight": (512, 14),
        "model.vae_encoder_latent_output_proj.weight": (64, 512),
        "model.encoder_robot_state_input_proj.weight": (512, 14),
        "model.encoder_latent_input_proj.weight": (512, 32),
        "model.encoder_img_feat_input_proj.weight": (512, 512, 1, 1),
        "model.encoder_1d_feature_pos_embed.weight": (2, 512),
        "model.decoder_pos_embed.weight": (100, 512),
        "model.action_head.weight": (14, 512),
    },
    "diffusion-policy": {
        "diffusion.rgb_encoder.backbone.0.weight": (64, 3, 7, 7),
        "diffusion.rgb_encoder.backbone.1.weight": (64,),
        "diffusion.rgb_encoder.backbone.4.0.conv1.weight": (64, 64, 3, 3),
        "diffusion.rgb_encoder.backbone.5.0.downsample.1.weight": (128,),
        "diffusion.rgb_encoder.backbone.7.1.bn2.bias": (512,),
        "diffusion.rgb_encoder.pool.nets.weight": (32, 512, 1, 1),
        "diffusion.rgb_encoder.out.weight": (64, 64),
        "diffusion.unet.diffusion_step_encoder.1.weight": (512, 128),
        "diffusion.unet.diffusion_step_encoder.3.weight": (128, 512),
        "diffusion.unet.down_modules.0.0.conv1.block.0.weight": (512, 2, 5),
        "diffusion.unet.down_modules.0.0.conv1.block.1.weight": (512,),
        "diffusion.unet.down_modules.0.0.cond_encoder.1.weight": (1024, 128 + 132),
        "diffusion.unet.down_modules.0.0.residual_conv.weight": (512, 2, 1),
        "diffusion.unet.down_modules.0.2.weight": (512, 512, 3),
        "diffusion.unet.down_modules.2.1.conv2.block.0.bias": (2048,),
        "diffusion.unet.mid_modules.1.conv2.block.0.weight": (2048, 2048, 5),
        "diffusion.unet.up_modules.0.0.conv1.block.0.weight": (1024, 4096, 5),
        "diffusion.unet.up_modules.0.0.residual_conv.weight": (1024, 4096, 1),
        "diffusion.unet.up_modules.1.2.weight": (512, 512, 4),
        "diffusion.unet.final_conv.0.block.0.weight": (512, 512, 5),
        "diffusion.unet.final_conv.1.weight": (2, 512, 1),
    },
}
ABSENT_KEYS = {
    "act": ["model.encoder.norm.weight", "model.backbone.bn1.num_batches_tracked", "model.backbone.fc.weight"],
    "diffusion-policy": ["diffusion.unet.down_modules.2.2.weight", "diffusion.rgb_encoder.backbone.8.weight"],
}
CLASSES = {"act": ACTPolicy, "diffusion-policy": DiffusionPolicy}


def to_lerobot(cls: type[nn.Module], key: str) -> str:
    """Replica key → lerobot key: the inverse of the class's first-match prefix renames."""
    for lerobot_prefix, replica_prefix in cls.LEROBOT_RENAMES:
        if key.startswith(replica_prefix):
            return lerobot_prefix + key[len(replica_prefix) :]
    raise AssertionError(f"no rename covers {key}")


def from_lerobot(cls: type[nn.Module], checkpoint: dict[str, Tensor]) -> dict[str, Tensor]:
    """What a checkpoint loader does with the class attributes: drop ignored keys, rename the rest."""
    renamed = {}
    for key, value in checkpoint.items():
        if key.startswith(cls.LEROBOT_IGNORED):
            continue
        prefix, replacement = next((p, r) for p, r in cls.LEROBOT_RENAMES if key.startswith(p))
        renamed[replacement + key[len(prefix) :]] = value
    return renamed


@pytest.mark.parametrize("name", ["act", "diffusion-policy"])
def test_replica_keys_map_onto_lerobot_layout(name: str) -> None:
    cls = CLASSES[name]
    with torch.device("meta"):
        model = cls(load_model_spec(name))
    lerobot = {to_lerobot(cls, key): tuple(value.shape) for key, value in model.state_dict().items()}
    assert len(lerobot) == len(model.state_dict())
    for key, shape in LEROBOT_KEYS[name].items():
        assert key in lerobot, key
        assert shape is None or lerobot[key] == shape, (key, lerobot[key], shape)
    for key in ABSENT_KEYS[name]:
        assert key not in lerobot


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("act-tiny", {"model.vae_encoder_pos_enc": torch.zeros(1, 12, 32)}),
        ("diffusion-policy-tiny", {"diffusion.rgb_encoder.pool.pos_grid": torch.zeros(4, 2)}),
    ],
)
def test_a_lerobot_checkpoint_loads_by_prefix_rename(name: str, extra: dict[str, Tensor]) -> None:
    source, target = tiny(name, seed=3), tiny(name, seed=4)
    cls = type(source)
    checkpoint = {to_lerobot(cls, key): value for key, value in source.state_dict().items()}
    checkpoint.update(extra)
    checkpoint["normalize_inputs.buffer_observation_state.mean"] = torch.zeros(14)
    target.load_state_dict(from_lerobot(cls, checkpoint), strict=True)
    spec = load_model_spec(name)
    obs, x_t = observation(spec), noise(spec)
    assert torch.equal(infer(source, obs, x_t)[2], infer(target, obs, x_t)[2])


# ---------------------------------------------------------------- ONNX export


class _Phase(nn.Module):
    """One phase of ``model`` as its own graph: ``run(model, *inputs)``."""

    def __init__(self, model: nn.Module, run) -> None:
        super().__init__()
        self.model, self.run = model, run

    def forward(self, *inputs: Tensor):
        return self.run(self.model, *inputs)


def onnx_outputs(module: nn.Module, args: tuple[Tensor, ...], names: list[str]) -> list[np.ndarray]:
    import onnxruntime

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buffer, input_names=names, opset_version=18, dynamo=False)
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    feeds = dict(zip(names, (arg.numpy() for arg in args), strict=True))
    # Inputs a graph never reads (ACT's x_t and t) are dropped by the exporter.
    return session.run(None, {node.name: feeds[node.name] for node in session.get_inputs()})


@pytest.mark.parametrize("name", ["act-tiny", "diffusion-policy-tiny"])
def test_every_phase_exports_to_onnx_and_onnxruntime_reproduces_it(name: str) -> None:
    pytest.importorskip("onnxruntime")
    spec = load_model_spec(name)
    model = tiny(name)
    obs, x_t = observation(spec), noise(spec)
    t = torch.full((1,), 7.0)
    tokens, cache, out = infer(model, obs, x_t, t=7.0)
    cache_tensors = tuple(getattr(cache, field.name) for field in fields(cache))
    cache_names = [field.name for field in fields(cache)]

    def prefill_phase(model, image_tokens, state):
        cache = model.prefill(Observation(image_tokens, obs.language_tokens, obs.language_mask, state), image_tokens)
        return tuple(getattr(cache, field.name) for field in fields(cache))

    def denoise_phase(model, x_t, t, *tensors):
        return model.denoise_step(x_t, t, type(cache)(*tensors))

    with torch.no_grad():
        (vision,) = onnx_outputs(
            _Phase(model, lambda model, images: model.embed_images(images)), (obs.images,), ["images"]
        )
        prefill = onnx_outputs(_Phase(model, prefill_phase), (tokens, obs.state), ["image_tokens", "state"])
        (denoise,) = onnx_outputs(_Phase(model, denoise_phase), (x_t, t, *cache_tensors), ["x_t", "t", *cache_names])
    np.testing.assert_allclose(vision, tokens.numpy(), atol=1e-4)
    for got, expected in zip(prefill, cache_tensors, strict=True):
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-4)
    np.testing.assert_allclose(denoise, out.numpy(), atol=1e-4)
