"""MuJoCo Reacher-v5: environment, a scripted expert, the success criterion, and expert demonstrations.

Observation (10): cos q (2), sin q (2), target xy (2), joint velocities (2), fingertip − target xy (2).
Action (2): joint torques in [-1, 1] (gear 200). An episode is 50 steps of 0.02 s, then truncated.

Success: the fingertip ends the episode within ``SUCCESS_DISTANCE`` = 0.02 m of the target, measured with the
forward kinematics of the final observation. 0.02 m is where the fingertip sphere (radius 0.01) and the target
sphere (radius 0.009) touch. The scripted expert's worst final distance over the first 200 seeds is 0.004 m (a
target near the base, out of reach within the elbow limit of ±3 rad) and its median is below 1e-6 m, so the
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
_EXPERT_GAINS = (4.5, 0.3)  # PD gain per rad and damping per rad/s: settles in ~10 steps without overshoot

Controller = Callable[[np.ndarray], np.ndarray]


def make_env() -> Any:
    """A headless Reacher-v5 environment (truncated after ``EPISODE_STEPS``)."""
    try:
        import gymnasium
    except ImportError:
        raise UnavailableError(f"{ENV_ID} needs gymnasium with MuJoCo: pip install 'gymnasium[mujoco]'") from None
    try:
        return gymnasium.make(ENV_ID, max_episode_steps=EPISODE_STEPS, disable_env_checker=True)
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


def _expert_torques(
    q0: float, q1: float, x: float, y: float, v0: float, v1: float, gain: float, damping: float
) -> tuple[float, float]:
    l0, l1 = LINK_LENGTHS
    cos_elbow = min(1.0, max(-1.0, (x * x + y * y - l0 * l0 - l1 * l1) / (2 * l0 * l1)))
    elbow = min(math.acos(cos_elbow), ELBOW_LIMIT)
    best = None
    for goal1 in (elbow, -elbow):
        goal0 = math.atan2(y, x) - math.atan2(l1 * math.sin(goal1), l0 + l1 * math.cos(goal1))
        error = ((goal0 - q0 + math.pi) % (2 * math.pi) - math.pi, goal1 - q1)
        if best is None or abs(error[0]) + abs(error[1]) < abs(best[0]) + abs(best[1]):
            best = error
    return (
        min(1.0, max(-1.0, gain * best[0] - damping * v0)),
        min(1.0, max(-1.0, gain * best[1] - damping * v1)),
    )


def expert_action(obs: np.ndarray, gain: float = _EXPERT_GAINS[0], damping: float = _EXPERT_GAINS[1]) -> np.ndarray:
    """Scripted expert: analytic inverse kinematics for the target, then joint-space PD damped by the velocity.

    Of the two elbow solutions it steers to the one nearer the current joint angles (shoulder error wrapped to
    ±π); a target inside the elbow limit's reach is approached as closely as the limit allows."""
    c0, c1, s0, s1, x, y, v0, v1 = obs[:8].tolist()
    return np.array(_expert_torques(math.atan2(s0, c0), math.atan2(s1, c1), x, y, v0, v1, gain, damping))


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


class _Lookahead:
    """Simulates the expert ahead from the environment's current state on a scratch copy of the simulator."""

    def __init__(self, env: Any) -> None:
        import mujoco

        self.mujoco = mujoco
        self.env = env.unwrapped
        self.scratch = mujoco.MjData(self.env.model)
        self.spec = mujoco.mjtState.mjSTATE_INTEGRATION
        self.state = np.empty(mujoco.mj_stateSize(self.env.model, self.spec))

    def chunk(self, horizon: int) -> np.ndarray:
        """The expert's next ``horizon`` actions from the environment's current state."""
        mujoco, model = self.mujoco, self.env.model
        mujoco.mj_getState(model, self.env.data, self.state, self.spec)
        mujoco.mj_setState(model, self.scratch, self.state, self.spec)
        actions = []
        for _ in range(horizon):
            q0, q1, x, y = self.scratch.qpos.tolist()
            v0, v1 = self.scratch.qvel[:2].tolist()
            action = _expert_torques(q0, q1, x, y, v0, v1, *_EXPERT_GAINS)
            actions.append(action)
            self.scratch.ctrl[:] = action
            mujoco.mj_step(model, self.scratch, nstep=self.env.frame_skip)
        return np.array(actions)


def collect_demonstrations(episodes: int, seed: int, horizon: int, action_noise: float = 0.0) -> Demonstrations:
    """Pair every step's observation with the expert's next ``horizon`` actions from that state.

    DART-style noise injection: episode e executes the expert's action plus Gaussian noise of a standard deviation
    drawn from U(0, ``action_noise``), so the data covers states off the expert's path (and near the target but
    not on it); the labels are always the clean expert, simulated ahead from the visited state."""
    env = make_env()
    lookahead = _Lookahead(env)
    observations, chunks = [], []
    for episode in range(episodes):
        episode_seed = DEMO_SEED_BASE + seed * 100_000 + episode
        rng = np.random.default_rng(episode_seed)
        noise = rng.uniform(0.0, action_noise)
        obs, _ = env.reset(seed=episode_seed)
        for _ in range(EPISODE_STEPS):
            chunk = lookahead.chunk(horizon)
            observations.append(obs)
            chunks.append(chunk)
            obs, *_ = env.step(np.clip(chunk[0] + noise * rng.standard_normal(ACTION_DIM), -1.0, 1.0))
    env.close()
    return Demonstrations(np.asarray(observations, np.float32), np.asarray(chunks, np.float32))
