"""Scripted demonstrations of the simulator's task, for training a policy without ROS.

Each demonstration episode runs the arm on the simulator's timeline (the same joint lag and
control rate as `lamp eval`) from a random start, driven by the scripted expert with a slowly
wandering disturbance added to its commands (DART-style: the arm visits states off the
expert's own path, and the labels say how the expert gets back). The disturbance is an offset
from the expert's undisturbed path, so it stays bounded whatever the max step. Every control
tick is one sample: the privileged state needed to render its camera images again (time,
joints, cube) and its label, the chunk of commands the expert plans from there.

The label plans toward where the cube is *now* (what the images show), moving at the clamp's
max step and holding once there: the cube's future drift is not visible in one frame, so a
label that followed it would ask the policy to guess. The joints the task does not need go back
to their home position (0), so the disturbance cannot carry them away. Samples are small (no
pixels); a trainer renders the images of a batch when it needs them (`observation`),
identically every time.
"""

from dataclasses import dataclass

import numpy as np

from lamp_ros.observation import DEFAULT_PROMPT
from lamp_ros.sim.dynamics import follow
from lamp_ros.sim.scene_world import FRAME, JOINT_RATE_HZ, TAU_S
from lamp_ros.sim.scene import render
from lamp_ros.sim.task import ReachTask

START_RANGE = 1.2        # joint1 starts uniform in +-this (rad): both edges of the cube's range
OTHER_JITTER = 0.05      # the other joints start within +-this of 0 (rad; the gripper: 0..this/5)
DISTURBANCE = 0.25       # std of the wandering offset added to the expert's commands (rad)
DISTURBANCE_TAU_S = 1.0  # its correlation time


@dataclass(frozen=True)
class Demonstrations:
    """N samples of `episodes` demonstration episodes (arrays; index i is one sample)."""

    t: np.ndarray          # (N,) time in the episode (s)
    q: np.ndarray          # (N, J) joint positions: the observation's state
    cube_x: np.ndarray     # (N,) the cube's centre (fraction of the base camera's width)
    actions: np.ndarray    # (N, H, J) the expert's chunk of commands from there
    episode: np.ndarray    # (N,) which episode
    seed: int

    def __len__(self) -> int:
        return len(self.t)

    def observation(self, i: int, slots=('base', 'left_wrist', 'right_wrist'),
                    prompt: str = DEFAULT_PROMPT) -> dict:
        """Sample i as the policy sees it: camera frames of the simulator's size, the state
        and the task prompt."""
        q = self.q[i].astype(np.float64)
        images = {slot: render(slot, FRAME[1], FRAME[0], float(self.t[i]), q,
                               float(self.cube_x[i])) for slot in slots}
        return {'images': images, 'state': self.q[i].astype(np.float32), 'prompt': prompt}


def expert_chunk(task: ReachTask, t: float, q: np.ndarray, horizon: int,
                 max_step: np.ndarray) -> np.ndarray:
    """(horizon, J) commands from joint state q toward the hover point over the cube's current
    place (the other joints home), at most max_step per tick, then holding there."""
    home = np.zeros(len(q))
    home[:2] = q[:2]
    target = task.expert_target(t, home)
    chunk = np.empty((horizon, len(q)))
    last = np.asarray(q, np.float64)
    for i in range(horizon):
        last = last + np.clip(target - last, -max_step, max_step)
        chunk[i] = last
    return chunk


def collect(episodes: int, seed: int, rate_hz: float, max_step, horizon: int, limits: tuple,
            seconds: float = 10.0, progress=None) -> Demonstrations:
    """Run `episodes` disturbed expert episodes; every tick becomes a sample. `limits`:
    (lower, upper) joint limits the commands are clipped to, as the robot's clamp would."""
    lower, upper = (np.asarray(v, np.float64) for v in limits)
    joints = len(lower)
    max_step = np.broadcast_to(np.asarray(max_step, np.float64), (joints,))
    period = 1.0 / rate_hz
    columns = {'t': [], 'q': [], 'cube_x': [], 'actions': [], 'episode': []}
    for e in range(episodes):
        rng = np.random.default_rng([seed, e])
        task = ReachTask.episode(seed, e)
        q = np.zeros(joints)
        q[0] = rng.uniform(-START_RANGE, START_RANGE)
        q[1:-1] = rng.uniform(-OTHER_JITTER, OTHER_JITTER, joints - 2)
        q[-1] = rng.uniform(0.0, OTHER_JITTER / 5)
        command = q.copy()
        clean = q.copy()      # the expert's own path, without the disturbance
        offset = np.zeros(joints)
        decay = np.exp(-period / DISTURBANCE_TAU_S)
        scale = DISTURBANCE * np.sqrt(1 - decay ** 2) * (max_step / max_step.max())
        joint_t = 0.0
        for k in range(1, int(round(seconds * rate_hz)) + 1):
            t = k * period
            while joint_t + 1.0 / JOINT_RATE_HZ <= t + 1e-9:
                joint_t += 1.0 / JOINT_RATE_HZ
                q = follow(q, command, 1.0 / JOINT_RATE_HZ, TAU_S)
            chunk = expert_chunk(task, t, q, horizon, max_step)
            for key, value in (('t', t), ('q', q.copy()), ('cube_x', task.cube_x(t)),
                               ('actions', chunk), ('episode', e)):
                columns[key].append(value)
            clean = expert_chunk(task, t, clean, 1, max_step)[0]
            offset = decay * offset + scale * rng.standard_normal(joints)
            command = np.clip(clean + offset, lower, upper)
        if progress:
            progress(e + 1, episodes)
    return Demonstrations(
        t=np.asarray(columns['t'], np.float64), q=np.asarray(columns['q'], np.float32),
        cube_x=np.asarray(columns['cube_x'], np.float64),
        actions=np.asarray(columns['actions'], np.float32),
        episode=np.asarray(columns['episode'], np.int64), seed=seed)
