"""Meta-World v3 for the closed loop: tasks with their instructions and scripted experts, and a headless camera.

A :class:`MetaWorldTask` is one Meta-World environment (``metaworld.env_dict.ALL_V3_ENVIRONMENTS``) whose episodes
are the 50 configurations (object and goal positions) of the MT1 benchmark built with a given seed, set with
``env.set_task`` as Meta-World's own README does: episode e plays configuration e mod 50, so every policy variant
meets the same scenes. Evaluation uses MT1 seed :data:`EVALUATION_SEED`; demonstrations use other seeds
(:data:`DEMONSTRATION_SEEDS`), so no evaluated scene was demonstrated. MT1 makes the goal observable: the 39-value
observation is the hand position, the gripper opening, up to two objects' positions and quaternions, the same 18
values one step earlier, and the goal position. An episode succeeds the first step Meta-World's ``info["success"]``
is set (the criterion each task defines), and ends there or after ``max_steps`` steps.

Frames come from MuJoCo's own renderer on the named camera, headless (``MUJOCO_GL=egl`` unless set: Debian's
libegl-mesa0 and libgl1-mesa-dri), with shadows, reflections, the skybox and multisampling off: at 64 × 64 these
cost most of a software-rendered frame and add nothing a policy reads (about 5× faster here).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from vlabench.errors import InputError, UnavailableError, unknown_name

STATE_DIM = 39
ACTION_DIM = 4  # end-effector x, y, z displacement and gripper effort, each in [-1, 1]
CONFIGURATIONS = 50  # scenes per MT1 benchmark
EVALUATION_SEED = 0
DEMONSTRATION_SEEDS = range(1000, 1100)  # MT1 seeds of the demonstrated scenes: 50 per seed
INSTALL_HINT = "pip install 'vlabench[sim]' (metaworld, MuJoCo); headless rendering needs libegl-mesa0 libgl1-mesa-dri"
_RENDER_FLAGS_OFF = ("mjRND_SHADOW", "mjRND_REFLECTION", "mjRND_SKYBOX")


@dataclass(frozen=True)
class TaskSet:
    """What a Meta-World policy is trained and evaluated on: task → instruction, and what its camera sees."""

    instructions: dict[str, str]
    camera: str
    image_size: int

    @property
    def tasks(self) -> list[str]:
        return list(self.instructions)

    def choose(self, names: list[str] | None) -> TaskSet:
        """The same set narrowed to ``names`` (None: all); unknown names list the trained ones."""
        if names is None:
            return self
        if not names:
            raise InputError(f"no Meta-World task given; this policy was trained on {', '.join(self.tasks)}")
        for name in names:
            if name not in self.instructions:
                raise unknown_name("Meta-World task this policy was trained on", name, self.tasks)
        return TaskSet({name: self.instructions[name] for name in dict.fromkeys(names)}, self.camera, self.image_size)


DEFAULT_TASKS = TaskSet(
    instructions={
        "reach-v3": "reach the goal position with the gripper",
        "button-press-topdown-v3": "press the button down from the top",
        "coffee-button-v3": "push the button on the coffee machine",
        "plate-slide-v3": "slide the plate into the goal",
        "door-close-v3": "push the door closed",
    },
    camera="corner3",
    image_size=64,
)
"""Five tasks the scripted experts solve in every scene tried (reaching, pressing, sliding, swinging a door shut: no
grasping), chosen so a policy small enough to train on two CPU cores in under an hour can learn them, and so that no
trivial motion solves them (an arm that only moves down presses handle-press-v3's handle in most scenes; random
actions close drawer-close-v3's drawer in some: both left out). The random-action row of every evaluation measures
that floor."""


def _metaworld() -> Any:
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless; read when MuJoCo's renderer is first imported
    try:
        import metaworld
        import metaworld.policies
    except ImportError as exc:
        raise UnavailableError(f"Meta-World is not installed ({exc}): {INSTALL_HINT}") from None
    return metaworld


def scripted_expert(task: str) -> Any:
    """Meta-World's scripted policy for ``task`` (``metaworld.policies``), e.g. SawyerReachV3Policy for reach-v3."""
    policies = _metaworld().policies
    name = "Sawyer" + "".join(part.capitalize() for part in task.removesuffix("-v3").split("-")) + "V3Policy"
    policy = getattr(policies, name, None)
    if policy is None:
        raise UnavailableError(f"Meta-World has no scripted policy {name} for {task}")
    return policy()


@lru_cache(maxsize=64)
def scenes(task: str, benchmark_seed: int) -> tuple[Any, ...]:
    """The 50 scenes (``metaworld.Task``: object and goal positions) of the MT1 benchmark of ``task`` built with
    ``benchmark_seed``; built once per process (MT1 resets a fresh environment 50 times to draw them)."""
    return tuple(_metaworld().MT1(task, seed=benchmark_seed).train_tasks)


class MetaWorldTask:
    """One task's environment, its scenes of one MT1 seed, and a camera. Close it (the EGL context raises when it
    is collected instead)."""

    def __init__(self, task: str, camera: str, image_size: int, benchmark_seed: int, max_steps: int) -> None:
        _metaworld()
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS

        if task not in ALL_V3_ENVIRONMENTS:
            raise unknown_name("Meta-World task", task, sorted(ALL_V3_ENVIRONMENTS))
        self.task, self.max_steps = task, max_steps
        self.scenes = scenes(task, benchmark_seed)
        self.env = ALL_V3_ENVIRONMENTS[task]()
        model = self.env.model
        cameras = [model.camera(index).name for index in range(model.ncam)]
        if camera not in cameras:
            self.env.close()
            raise unknown_name("Meta-World camera", camera, cameras)
        self.camera, self.image_size = camera, image_size
        self.renderer: Any = None  # made by the first frame: an episode without frames needs no GL context
        self.steps = 0

    def _renderer(self) -> Any:
        import mujoco

        self.env.model.vis.quality.offsamples = 0
        try:
            return mujoco.Renderer(self.env.model, self.image_size, self.image_size)
        except Exception as exc:  # any GL backend failure: no headless rendering here
            backend = os.environ.get("MUJOCO_GL", "default")
            raise UnavailableError(
                f"MuJoCo cannot render headless (MUJOCO_GL={backend}): {exc}; {INSTALL_HINT}"
            ) from None

    def reset(self, episode: int) -> np.ndarray:
        """Start episode ``episode`` (scene ``episode`` mod 50); returns the first observation."""
        self.env.set_task(self.scenes[episode % len(self.scenes)])
        observation, _ = self.env.reset()
        self.steps = 0
        return observation.astype(np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """One control step: (observation, success, episode over)."""
        observation, _, _, _, info = self.env.step(np.clip(action, -1.0, 1.0).astype(np.float32))
        self.steps += 1
        success = bool(info["success"])
        return observation.astype(np.float32), success, success or self.steps >= self.max_steps

    def frame(self) -> np.ndarray:
        """The camera's view now: (image_size, image_size, 3) uint8."""
        import mujoco

        if self.renderer is None:
            self.renderer = self._renderer()
        self.renderer.update_scene(self.env.data, camera=self.camera)
        for flag in _RENDER_FLAGS_OFF:
            self.renderer.scene.flags[getattr(mujoco.mjtRndFlag, flag)] = False
        return self.renderer.render()

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()
        self.env.close()
