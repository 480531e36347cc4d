"""Behaviour cloning of a smolvla-family replica on scripted Meta-World demonstrations (flow matching, as SmolVLA).

The model is the replica ``vlabench run`` builds from the spec (``build_replica``: the same modules, the same
``prefix`` and ``denoise_step``), initialised with its seeded weights and trained whole. Inputs go through the same
``InputPipeline`` a closed-loop episode uses (frames to [-1, 1], the instruction through the policy's tokenizer, the
state normalized with the demonstrations' statistics); actions are normalized the same way. SmolVLA's loss: t ~
Beta(1.5, 1) · 0.999 + 0.001, x_t = t · noise + (1 − t) · actions, and the expert regresses noise − actions, which
the Euler loop integrates from t = 1 to 0. AdamW with a linear warm-up and a cosine decay, gradients clipped.
Everything random is seeded; for a given config and thread count a run repeats bit for bit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from vlabench.models.input_pipeline import InputPipeline, Normalization, RawObservation
from vlabench.models.lerobot_folder import STD_FLOOR
from vlabench.models.replicas import build_replica
from vlabench.models.specs import load_model_spec
from vlabench.models.workload import Workload
from vlabench.optimizations.closed_loop.metaworld import DEFAULT_TASKS, TaskSet
from vlabench.optimizations.closed_loop.metaworld_demos import Demonstrations, collect

CPU = torch.device("cpu")


@dataclass(frozen=True)
class TrainingConfig:
    """Everything the trained weights depend on (with the task set and the thread count)."""

    model: str = "smolvla-metaworld-tiny"
    seed: int = 0
    episodes: int = 100  # demonstrated episodes per task
    action_noise: float = 0.3  # the largest per-episode standard deviation of the executed noise
    frame_every: int = 2  # a sample every n-th step
    max_steps: int = 200
    train_steps: int = 6000
    batch_size: int = 64
    learning_rate: float = 1e-3
    warmup_steps: int = 200
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    loss_every: int = 100  # steps per point of the recorded loss curve


@dataclass
class TrainingRecord:
    """How the weights were made: the data's identity, the loss curve and the time each part took."""

    config: dict[str, Any]
    tasks: dict[str, str]
    camera: str
    image_size: int
    data_sha256: str
    samples: int
    expert_successes: int
    demonstrated_episodes: int
    threads: int
    torch_version: str
    data_wall_s: float = 0.0
    train_wall_s: float = 0.0
    loss_curve: list[float] = field(default_factory=list)  # mean loss over each ``loss_every`` steps

    @property
    def final_loss(self) -> float:
        return self.loss_curve[-1] if self.loss_curve else math.nan


@dataclass
class TrainedPolicy:
    model: torch.nn.Module
    normalization: Normalization
    tokenizer: Any
    record: TrainingRecord


def instruction_tokenizer(task_set: TaskSet, vocab: int, length: int) -> Any:
    """A BPE tokenizer (Hugging Face ``tokenizers``) trained on the task set's instructions, at most ``vocab`` ids,
    padding and truncating to ``length``: the policy's own tokenizer, saved with it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["[PAD]", "[UNK]"], show_progress=False)
    tokenizer.train_from_iterator(list(task_set.instructions.values()), trainer)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=length)
    tokenizer.enable_truncation(max_length=length)
    return tokenizer


def normalization_of(demos: Demonstrations) -> Normalization:
    """Mean and standard deviation (floored at ``STD_FLOOR``) of the states and of every action in the chunks."""
    states = torch.from_numpy(demos.states)
    actions = torch.from_numpy(demos.actions).flatten(0, 1)
    return Normalization(
        states.mean(0), states.std(0).clamp_min(STD_FLOOR), actions.mean(0), actions.std(0).clamp_min(STD_FLOOR)
    )


def _schedule(config: TrainingConfig) -> Callable[[int], float]:
    def factor(step: int) -> float:
        warm = min(1.0, (step + 1) / max(1, config.warmup_steps))
        return warm * 0.5 * (1 + math.cos(math.pi * step / config.train_steps))

    return factor


def train(
    config: TrainingConfig,
    task_set: TaskSet = DEFAULT_TASKS,
    threads: int = 1,
    progress: Callable[[str], None] | None = None,
) -> TrainedPolicy:
    """Collect the demonstrations, then train the replica from its seeded weights (see the module docstring)."""
    spec = load_model_spec(config.model)
    if (spec.action.state_dim, spec.action.action_dim) != (39, 4) or spec.cameras != 1:
        raise ValueError(f"{config.model} does not read one camera, a 39-value state and 4-value actions")
    if spec.vision.image_size != task_set.image_size:
        raise ValueError(
            f"{config.model} reads {spec.vision.image_size}-px frames; the task set renders {task_set.image_size}"
        )
    started = time.perf_counter()
    demos = collect(
        task_set,
        config.episodes,
        config.seed,
        spec.action.chunk,
        config.action_noise,
        config.frame_every,
        config.max_steps,
        progress,
    )
    data_wall = time.perf_counter() - started
    workload = Workload.from_spec(spec, batch=config.batch_size)
    tokenizer = instruction_tokenizer(task_set, spec.llm.vocab, workload.language_tokens)
    normalization = normalization_of(demos)
    pipeline = InputPipeline(spec, workload, config.seed, torch.float32, CPU, normalization, tokenizer)
    instructions = list(task_set.instructions.values())
    frames, states = torch.from_numpy(demos.frames), torch.from_numpy(demos.states)
    actions = (torch.from_numpy(demos.actions) - normalization.action_mean) / normalization.action_std
    record = TrainingRecord(
        config=asdict(config),
        tasks=dict(task_set.instructions),
        camera=task_set.camera,
        image_size=task_set.image_size,
        data_sha256=demos.digest(),
        samples=len(demos),
        expert_successes=demos.expert_successes,
        demonstrated_episodes=demos.episodes * len(instructions),
        threads=threads,
        torch_version=torch.__version__,
        data_wall_s=round(data_wall, 1),
    )
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = _fit(spec, config, pipeline, frames, states, demos.tasks, instructions, actions, record, progress)
    finally:
        torch.set_num_threads(previous_threads)
    record.train_wall_s = round(time.perf_counter() - started - data_wall, 1)
    return TrainedPolicy(model.eval().requires_grad_(False), normalization, tokenizer, record)


def _fit(spec, config, pipeline, frames, states, tasks, instructions, actions, record, progress) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(config.seed)
    model = build_replica(spec, config.seed, torch.float32, CPU).train().requires_grad_(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config))
    window: list[float] = []
    for step in range(config.train_steps):
        index = torch.randint(len(states), (config.batch_size,), generator=generator)
        raw = RawObservation(frames[index][:, None], [instructions[i] for i in tasks[index].tolist()], states[index])
        target = actions[index]
        noise = torch.randn(target.shape, generator=generator)
        # Beta(1.5, 1) by inverting its CDF t^1.5, from the seeded generator
        t = torch.rand(config.batch_size, generator=generator).pow(2 / 3) * 0.999 + 0.001
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * target
        velocity = model.denoise_step(x_t, t, model.prefix(pipeline.preprocess(raw)))
        loss = F.mse_loss(velocity, noise - target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        window.append(loss.item())
        if len(window) == config.loss_every or step == config.train_steps - 1:
            record.loss_curve.append(round(sum(window) / len(window), 5))
            window.clear()
            if progress:
                progress(f"step {step + 1}/{config.train_steps}: loss {record.loss_curve[-1]:.4f}")
    return model
