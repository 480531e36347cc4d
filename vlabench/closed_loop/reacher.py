"""MuJoCo Reacher-v5: environment, a scripted expert, the success criterion, and expert demonstrations.

Observation (10): cos q (2), sin q (2), target xy (2), joint velocities (2), fingertip − target xy (2).
Action (2): joint torques in [-1, 1] (gear 200). An episode is 50 steps of 0.02 s, then truncated.

Success: the fingertip ends the episode within ``SUCCESS_DISTANCE`` = 0.02 m of the target, measured with the
forward kinematics of the final observation. 0.02 m is where the fingertip sphere (radius 0.01) and the target
sphere (radius 0.009) touch. The scripted expert's worst final distance over the first 200 seeds is 0.004 m (a
target near the base, out of reach within the elbow limit of ±3 rad) and its median is below 1e-4 m, so the
threshold leaves a 5× margin over the expert and still rejects a policy that stops short or oscillates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlabench.errors import UnavailableError

ENV_ID = "Reacher-v5"
LINK_LENGTHS = (0.1, 0.11)
ELBOW_LIMIT = 3.0
EPISODE_STEPS = 50
OBS_DIM = 10
ACTION_DIM = 2
SUCCESS_DISTANCE = 0.02
DEMO_SEED_BASE = 1_000_000  # demonstrations never reuse the small evaluation seeds

Controller = Callable[[np.ndarray], np.ndarray]


def make_env(max_episode_steps: int = EPISODE_STEPS) -> Any:
    """A headless Reacher-v5 environment truncated after ``max_episode_steps``."""
    try:
        import gymnasium
    except ImportError:
        raise UnavailableError(f"{ENV_ID} needs gymnasium with MuJoCo: pip install 'gymnasium[mujoco]'") from None
    try:
        return gymnasium.make(ENV_ID, max_episode_steps=max_episode_steps, disable_env_checker=True)
    except (ImportError, gymnasium.error.DependencyNotInstalled) as exc:
        raise UnavailableError(f"{ENV_ID}: {exc}; pip install 'gymnasium[mujoco]'") from None


def joint_angles(obs: np.ndarray) -> np.ndarray:
    """Joint angles (2,) recovered from the cos/sin part of an observation."""
    return np.arctan2(obs[2:4], obs[0:2])


def fingertip(obs: np.ndarray) -> np.ndarray:
    """Fingertip xy by forward kinematics of the observed joint angles."""
    q0, q1 = joint_angles(obs)
    l0, l1 = LINK_LENGTHS
    return np.array([l0 * math.cos(q0) + l1 * math.cos(q0 + q1), l0 * math.sin(q0) + l1 * math.sin(q0 + q1)])


def target_distance(obs: np.ndarray) -> float:
    """Fingertip-to-target distance in metres."""
    return float(np.linalg.norm(fingertip(obs) - obs[4:6]))


def is_success(obs: np.ndarray) -> bool:
    """Whether a final observation meets the success criterion."""
    return target_distance(obs) < SUCCESS_DISTANCE


def expert_action(obs: np.ndarray, gain: float = 4.5, damping: float = 0.3) -> np.ndarray:
    """Scripted expert: analytic inverse kinematics for the target, then joint-space PD damped by the velocity.

    Of the two elbow solutions it steers to the one nearer the current joint angles (shoulder error wrapped to
    ±π); a target inside the elbow limit's reach is approached as closely as the limit allows."""
    q = joint_angles(obs)
    x, y = obs[4:6]
    l0, l1 = LINK_LENGTHS
    cos_elbow = np.clip((x * x + y * y - l0 * l0 - l1 * l1) / (2 * l0 * l1), -1.0, 1.0)
    elbow = min(math.acos(cos_elbow), ELBOW_LIMIT)
    errors = []
    for q1 in (elbow, -elbow):
        q0 = math.atan2(y, x) - math.atan2(l1 * math.sin(q1), l0 + l1 * math.cos(q1))
        errors.append(np.array([(q0 - q[0] + math.pi) % (2 * math.pi) - math.pi, q1 - q[1]]))
    error = min(errors, key=lambda e: float(np.abs(e).sum()))
    return np.clip(gain * error - damping * obs[6:8], -1.0, 1.0)


def run_episode(env: Any, controller: Controller, seed: int) -> np.ndarray:
    """Run one episode from ``env.reset(seed=seed)`` with a per-step controller; return the final observation."""
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, terminated, truncated, _ = env.step(controller(obs))
        done = terminated or truncated
    return obs


@dataclass(frozen=True)
class Demonstrations:
    """Expert data: each observation with the expert's next ``horizon`` actions."""

    observations: np.ndarray  # (N, OBS_DIM) float32
    actions: np.ndarray  # (N, horizon, ACTION_DIM) float32

    def __len__(self) -> int:
        return len(self.observations)


def collect_demonstrations(episodes: int, seed: int, horizon: int) -> Demonstrations:
    """Roll out the expert for ``episodes`` seeded episodes; pair every step's observation with its action chunk.

    Each episode runs ``horizon - 1`` steps past the 50-step limit so the last steps still have full chunks."""
    env = make_env(EPISODE_STEPS + horizon - 1)
    observations, chunks = [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=DEMO_SEED_BASE + seed * 100_000 + episode)
        episode_obs, episode_actions = [], []
        for _ in range(EPISODE_STEPS + horizon - 1):
            action = expert_action(obs)
            episode_obs.append(obs)
            episode_actions.append(action)
            obs, *_ = env.step(action)
        actions = np.stack(episode_actions)
        observations.extend(episode_obs[:EPISODE_STEPS])
        chunks.extend(actions[step : step + horizon] for step in range(EPISODE_STEPS))
    env.close()
    return Demonstrations(np.asarray(observations, np.float32), np.asarray(chunks, np.float32))
