"""The model zoo beyond the flow-matching VLAs: GR00T N1.5, OpenVLA(-OFT) and π0-FAST (ACT and Diffusion Policy
are in test_visuomotor.py), the action loops they run, traced FLOPs, and lerobot checkpoints for every family that
has a lerobot layout."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3Model
from typer.testing import CliRunner

from tests.support.hf_configs import decoder_geometry
from vlabench.analysis.flops import count_operators
from vlabench.analysis.flops_traced import trace_operators
from vlabench.analysis.operators import total
from vlabench.cli.app import app
from vlabench.commands.run import execute_many, plan_run, plan_runs
from vlabench.config import RunConfig
from vlabench.errors import InputError
from vlabench.measure.action_loops import make_action_loop
from vlabench.measure.ddpm_loop import DiffusionLoop
from vlabench.models.checkpoints import lerobot_name, load_checkpoint
from vlabench.models.replicas import build_replica, count_parameters, replica_class
from vlabench.models.replicas.decoder import TextDecoder
from vlabench.models.replicas.layers import additive_mask, block_mask, rope_cos_sin
from vlabench.models.spec_base import DiffusionActionSpec
from vlabench.models.specs import load_model_spec, model_names
from vlabench.models.workload import Workload, initial_noise, synthetic_observation
from vlabench.vocab import Phase

CPU = torch.device("cpu")
PAPER_POLICIES = {"act", "diffusion-policy", "smolvla", "gr00t-n1.5", "pi0", "pi05", "openvla-7b"}
NEW_TINY = ["gr00t-n1.5-tiny", "openvla-7b-tiny", "openvla-oft-tiny", "pi0-fast-tiny"]


def test_models_lists_the_papers_seven_policies_their_variants_and_tiny_versions():
    names = set(model_names())
    assert PAPER_POLICIES | {"openvla-oft", "pi0-fast"} <= names
    full = {name for name in names if load_model_spec(name).reference is not None}
    tiny = {load_model_spec(name).variant_of for name in names if load_model_spec(name).variant_of is not None}
    assert tiny == full
    listed = json.loads(CliRunner().invoke(app, ["models", "--json"]).stdout)
    assert {row["name"] for row in listed} == names


@pytest.mark.parametrize("name", [n for n in model_names() if load_model_spec(n).reference is not None])
def test_every_full_model_matches_its_reference_count_within_its_stated_tolerance(name):
    spec = load_model_spec(name)
    assert count_parameters(spec) == pytest.approx(spec.reference.params, rel=spec.reference.tolerance)


# models.md §1d/§5: SigLIP2 So400m 412.4M (transformers SiglipVisionConfig), Qwen3 12 layers ≈604M without
# embeddings, VL self-attention ≈201.3M; the DINOv2-L + SigLIP towers ≈713.1M (models.md §3).
@pytest.mark.parametrize(
    ("name", "component", "expected"),
    [
        ("gr00t-n1.5", "vision_tower", 412.4e6),
        ("gr00t-n1.5", "vl_self_attention", 201.3e6),
        ("openvla-7b", "vision_backbone", 713.1e6),
    ],
)
def test_component_counts(name, component, expected):
    with torch.device("meta"):
        model = replica_class(load_model_spec(name))(load_model_spec(name))
    assert sum(p.numel() for p in getattr(model, component).parameters()) == pytest.approx(expected, rel=0.01)


def test_gr00t_keeps_12_of_28_qwen3_layers_with_604m_weights_outside_the_embedding():
    spec = load_model_spec("gr00t-n1.5")
    with torch.device("meta"):
        llm = TextDecoder(spec.llm)
    layers = sum(p.numel() for p in llm.layers.parameters()) + llm.norm.weight.numel()
    assert (spec.llm.layers, spec.llm.published_layers) == (12, 28)
    assert layers == pytest.approx(604.0e6, rel=0.005)


def test_qwen3_decoder_matches_transformers():
    spec = load_model_spec("gr00t-n1.5-tiny").llm
    ours = TextDecoder(spec).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in ours.named_parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.2 + (1.0 if "norm" in name else 0.0))
    config = Qwen3Config(
        **decoder_geometry(spec, spec.vocab),
        rope_theta=spec.rope_theta,
        tie_word_embeddings=True,
        attn_implementation="eager",
    )
    hf = Qwen3Model(config).eval()
    missing = hf.load_state_dict(ours.state_dict(), strict=False)
    assert not missing.missing_keys and not missing.unexpected_keys
    tokens = torch.randint(0, spec.vocab, (1, 12), generator=generator)
    with torch.no_grad():
        expected = hf(input_ids=tokens).last_hidden_state
        h = ours.embed_tokens(tokens)
        positions = torch.arange(12)[None]
        cos, sin = rope_cos_sin(positions, spec.head_dim, spec.rope_theta, h.dtype)
        valid = torch.ones(1, 12, dtype=torch.bool)
        got, _, _ = ours(h, cos, sin, additive_mask(block_mask(positions, positions, valid), h.dtype))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


# ---- traced FLOPs -----------------------------------------------------------------------------------------


def test_tracer_agrees_with_the_analytic_counts_on_the_flow_models():
    """The meta-device tracer counts the same matrix products, attention and weight reads as the analytic model."""
    for name in ("pi0", "smolvla"):
        spec = load_model_spec(name)
        workload = Workload.from_spec(spec)
        traced, analytic = trace_operators(spec, workload, "bf16"), count_operators(spec, workload, "bf16")
        for phase in Phase.MODEL:
            ours = total(op for op in traced if op.phase == phase)
            reference = total(op for op in analytic if op.phase == phase)
            assert ours.flops == pytest.approx(reference.flops, rel=0.01), (name, phase)
            assert ours.weight_bytes == pytest.approx(reference.weight_bytes, rel=0.01), (name, phase)


@pytest.mark.parametrize(
    ("name", "phase", "gflop"),
    [  # models.md §3 (bf16, default cameras): GR00T Qwen3 12 layers 205.7 + VL self-attention 68.6; DiT step 58.1;
        # OpenVLA Llama-2 prefill n = 276 3614.7, one decode token 13.1 through the layers + 0.26 in the LM head
        ("gr00t-n1.5", "prefill", 205.7 + 68.6),
        ("gr00t-n1.5", "denoise_step", 58.1),
        ("openvla-7b", "prefill", 3614.7),
        ("openvla-7b", "denoise_step", 13.1 + 2 * 4096 * 32064 / 1e9),
    ],
)
def test_traced_flops_match_the_reference_per_phase_figures(name, phase, gflop):
    spec = load_model_spec(name)
    operators = count_operators(spec, Workload.from_spec(spec), "bf16")
    assert total(op for op in operators if op.phase == phase).flops / 1e9 == pytest.approx(gflop, rel=0.02)


# ---- action loops -----------------------------------------------------------------------------------------


class OracleNoise:
    """Predicts the exact noise that separates x_t from a known clean chunk: sampling must land on that chunk."""

    def __init__(self, clean: torch.Tensor, alphas: torch.Tensor) -> None:
        self.clean, self.alphas = clean, alphas

    def denoise_step(self, x_t, t, cache):
        alpha = float(self.alphas[int(t[0])])
        return (x_t - math.sqrt(alpha) * self.clean) / math.sqrt(1 - alpha)


@pytest.mark.parametrize(("scheduler", "steps"), [("ddpm", 20), ("ddim", 5)])
def test_ddpm_and_ddim_recover_the_clean_chunk_from_an_exact_noise_predictor(scheduler, steps):
    action = DiffusionActionSpec(
        chunk=8, actions_per_chunk=8, steps=steps, action_dim=2, state_dim=2, scheduler=scheduler, train_timesteps=20
    )
    loop = DiffusionLoop(action, steps, (1, 8, 2), CPU)
    clean = torch.rand(1, 8, 2) * 1.6 - 0.8
    noise = torch.randn(1, 8, 2, generator=torch.Generator().manual_seed(1))
    result = loop.sample(OracleNoise(clean, loop.alphas), None, noise)
    torch.testing.assert_close(result, clean, atol=1e-5, rtol=1e-5)


def test_ddpm_must_run_every_training_timestep():
    with pytest.raises(ValueError, match="DDPM runs every training timestep"):
        DiffusionActionSpec(chunk=8, actions_per_chunk=8, steps=10, action_dim=2, state_dim=2, train_timesteps=100)


def full_forward_logits(model, obs, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of the action range after the prompt and ``tokens``, recomputed without any cache (causal Llama)."""
    image_tokens = model.embed_images(obs.images)
    prompt, valid = model._prompt(obs, image_tokens)
    h = torch.cat([prompt, model.language_model.embed_tokens(tokens)], 1)
    valid = torch.cat([valid, torch.ones_like(tokens, dtype=torch.bool)], 1)
    order = torch.arange(h.shape[1])[None]
    spec = model.spec.llm
    cos, sin = rope_cos_sin(valid.long().cumsum(1) - 1, spec.head_dim, spec.rope_theta, h.dtype)
    hidden, _, _ = model.language_model(h, cos, sin, additive_mask(block_mask(order, order, valid), h.dtype))
    return model._action_logits(hidden[:, -1])


def test_greedy_decoding_with_the_kv_buffers_equals_recomputing_the_whole_sequence():
    spec = load_model_spec("openvla-7b-tiny")
    workload = Workload.from_spec(spec)
    model = build_replica(spec, 0, torch.float32, CPU)
    obs = synthetic_observation(spec, workload, 0, torch.float32, CPU)
    decoder = make_action_loop(spec, workload, CPU)
    with torch.no_grad():
        cache = model.prefix(obs)
        chosen = [cache.logits.argmax(-1)]
        original = model.decode_step
        model.decode_step = lambda token, c: (logits := original(token, c), chosen.append(logits[0].argmax(-1)))[0]
        actions = decoder.sample(model, cache, initial_noise(workload, 0, torch.float32, CPU))
        ids = torch.stack(chosen, 1) + decoder.first_id
        for step in range(1, ids.shape[1]):
            expected = full_forward_logits(model, obs, ids[:, :step]).argmax(-1)
            assert torch.equal(expected, ids[:, step] - decoder.first_id)
    assert int(cache.valid[:, -workload.steps :].sum()) == workload.steps
    assert actions.shape == (1, 1, 7)
    assert actions.abs().max() <= 1


# ---- every new family runs through torch and ONNX Runtime and passes the gate -------------------------------


@pytest.mark.parametrize("name", NEW_TINY)
def test_tiny_models_run_on_torch_and_onnxruntime_and_pass_the_gate(fast_run, name, tmp_path):
    plans, _ = plan_runs(RunConfig(model=name, backend="torch,onnxruntime", out=tmp_path, **fast_run.fields()))
    results = execute_many(plans)
    torch_run, ort_run = results
    assert ort_run.correctness is not None and ort_run.correctness.passed
    assert ort_run.correctness.relative_error < 1e-4
    steps = ort_run.workload.steps
    assert len(torch_run.timing.denoise_steps) == steps
    assert {"vision", "prefill", "denoise_step", "action", "e2e"} <= set(ort_run.timing.phases)
    assert ort_run.roofline is not None
    assert next(p for p in ort_run.roofline.phases if p.phase == "prefill").flops > 0


def test_optimizations_that_need_a_denoising_loop_are_refused_for_token_decoders():
    with pytest.raises(InputError, match="--dp-cache needs a denoising loop"):
        plan_run(RunConfig(model="openvla-7b-tiny", dp_cache="{0,2,4}"))
    with pytest.raises(InputError, match="--steps"):
        plan_run(RunConfig(model="openvla-7b-tiny", steps=3))
    with pytest.raises(InputError, match="flow-matching VLAs"):
        plan_run(RunConfig(model="gr00t-n1.5-tiny", fuse_expert_kv=True))


# ---- lerobot checkpoints ------------------------------------------------------------------------------------

LEROBOT_LAYOUTS = {  # which lerobot naming the simulated checkpoint uses for each family
    "smolvla-tiny": "model.vlm_with_expert",
    "pi0-tiny": "model.paligemma_with_expert.paligemma.model",
    "pi05-tiny": "model.paligemma_with_expert.paligemma.model",
    "act-tiny": "model.",
    "diffusion-policy-tiny": "diffusion.",
}


def write_lerobot_checkpoint(name: str, seed: int, path) -> torch.nn.Module:
    """A ``model.safetensors`` in lerobot's names, from the replica seeded with ``seed``; returns that replica."""
    spec = load_model_spec(name)
    source = build_replica(spec, seed, torch.float32, CPU)
    renames = type(source).LEROBOT_RENAMES
    layout = LEROBOT_LAYOUTS[name]
    preferred = tuple(rule for rule in renames if rule[0].startswith(layout)) + tuple(
        rule for rule in renames if rule[0] in ("model.", "diffusion.")
    )
    tensors = {lerobot_name(key, preferred): value.contiguous() for key, value in source.state_dict().items()}
    tensors["normalize_inputs.buffer_observation_state.mean"] = torch.zeros(3)
    save_file(tensors, str(path))
    return source


@pytest.mark.parametrize("name", list(LEROBOT_LAYOUTS))
def test_a_lerobot_checkpoint_reproduces_the_source_modules_actions(fast_run, name, tmp_path):
    file = tmp_path / "model.safetensors"
    source = write_lerobot_checkpoint(name, seed=7, path=file)
    plan = plan_run(RunConfig(model=name, checkpoint=tmp_path, **fast_run.fields()))
    loaded = build_replica(plan.spec, seed=0, dtype=torch.float32, device=CPU)
    workload = plan.workload
    obs = synthetic_observation(plan.spec, workload, 0, torch.float32, CPU)
    noise = initial_noise(workload, 0, torch.float32, CPU)
    with torch.no_grad():
        expected = make_action_loop(plan.spec, workload, CPU).sample(source, source.prefix(obs), noise)
        got = make_action_loop(plan.spec, workload, CPU).sample(loaded, loaded.prefix(obs), noise)
        seeded = build_replica(load_model_spec(name), seed=0, dtype=torch.float32, device=CPU)
        unloaded = make_action_loop(plan.spec, workload, CPU).sample(seeded, seeded.prefix(obs), noise)
    assert torch.equal(got, expected)
    assert not torch.equal(unloaded, expected)


def test_checkpoint_problems_are_listed_by_name(tmp_path):
    file = tmp_path / "model.safetensors"
    write_lerobot_checkpoint("act-tiny", seed=1, path=file)
    model = build_replica(load_model_spec("act-tiny"), 0, torch.float32, CPU)
    report = load_checkpoint(model, file)
    assert report.ignored == 1 and report.unexpected == []
    from safetensors.torch import load_file

    tensors = load_file(str(file))
    tensors.pop("model.action_head.weight")
    tensors["model.encoder_img_feat_input_proj.weight"] = torch.zeros(3, 3, 1, 1)
    tensors["model.not_a_module.weight"] = torch.zeros(2)
    save_file(tensors, str(file))
    with pytest.raises(InputError) as error:
        load_checkpoint(model, file)
    message = str(error.value)
    assert "action_head.weight" in message and "missing" in message
    assert "encoder_img_feat_input_proj.weight: file (3, 3, 1, 1)" in message
    assert "model.not_a_module.weight" in message


def test_checkpoint_cli_errors_and_provenance(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["run", "--model", "smolvla-tiny", "--checkpoint", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    unsupported = runner.invoke(app, ["run", "--model", "gr00t-n1.5-tiny", "--checkpoint", str(tmp_path)])
    assert unsupported.exit_code == 2 and "no lerobot layout" in unsupported.stderr
    garbage = runner.invoke(
        app,
        ["run", "--model", "act-tiny", "--checkpoint", str(tmp_path), "--min-iterations", "1", "--out", str(tmp_path)],
    )
    assert garbage.exit_code == 2 and "not a readable safetensors file" in garbage.stderr
    assert not list(tmp_path.glob("*.json"))
