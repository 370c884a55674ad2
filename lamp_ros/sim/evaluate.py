"""`lamp eval`: closed-loop episodes of a world's task: a MuJoCo world (world/) or the 2D scene.

Each episode runs on the world's own timeline, with no wall clock: the world's physics follows
the last command until each control tick, camera frames are rendered at the world's camera rate
(only the slots the controller reads), and control ticks run at the artifact's rate through the
same Runtime as the node (chunker, smoother and clamp included). `latency_ticks` D feeds each
tick the observation of D ticks earlier, as an inference that takes D periods would see it. Per
episode: the task's error over time, success (judged by the world), and the command's
smoothness, RMS jerk and the largest jump between consecutive commands at the ticks where a new
chunk came in (chunk boundaries), and the largest kink there: the change of that step from the
step before (a second difference), which a smooth motion does not have however fast it moves,
so it tells a discontinuity at a boundary from the arm's own speed. The scripted expert runs
through the same loop for reference. Episodes can run in parallel processes (sim/parallel.py);
each is the same whichever process runs it.
"""

from collections import deque
from dataclasses import dataclass, field
import math

import numpy as np

from lamp_ros.observation import DEFAULT_PROMPT
from lamp_ros.sim.scene_world import SceneWorld

STRIP_FRAMES = 6        # frames kept per episode for the report's picture
STRIP_WIDTH = 112       # their width (px)


@dataclass
class Episode:
    index: int
    success: bool
    mean_error: float
    final_error: float
    errors: list
    commands: list
    boundaries: list     # tick indices where a new chunk came in
    strip: list = field(default_factory=list)   # (t, small RGB frame) over the episode
    outcome: str = ''    # how the episode ended, in words (the world says)


class ArtifactController:
    """The artifact through its Runtime, one command per tick (None while it has no plan)."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.rate_hz = runtime.rate_hz
        self.joints = len(runtime.joint_names)

    def reset(self) -> None:
        self.runtime.reset()

    def __call__(self, observation, t: float, t_obs: float, task, q):
        command = self.runtime.step(observation, t, t_obs)
        return command, self.runtime.last_inferred


class EagerController:
    """The eager policy of a spec in its control pipeline (control.py), the reference every
    artifact of that spec is compared with."""

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.rate_hz = pipeline.rate_hz
        self.joints = len(pipeline.interface.joint_names)

    def reset(self) -> None:
        self.pipeline.reset()

    def __call__(self, observation, t: float, t_obs: float, task, q):
        fresh = self.pipeline.needs_chunk(t)
        return self.pipeline.tick(observation, t, t_obs), fresh


class ExpertController:
    """The scripted expert: straight to the task's joint target at `max_step` per tick."""

    def __init__(self, rate_hz: float, joints: int, max_step):
        self.rate_hz = rate_hz
        self.joints = joints
        self.max_step = np.broadcast_to(np.asarray(max_step, np.float64), (joints,))
        self.last = None

    def reset(self) -> None:
        self.last = None

    def __call__(self, observation, t: float, t_obs: float, task, q):
        start = np.asarray(q, np.float64) if self.last is None else self.last
        step = np.clip(task.expert_target(t, q) - start, -self.max_step, self.max_step)
        self.last = start + step
        return self.last, False


def spec_with_merge_mode(spec_path: str, merge_mode: str | None = None):
    """A spec, its chunker merging new chunks by `merge_mode` when given (ops/chunker.py
    MERGE_CHOICES: rtc/trained and rtc/guided name real-time chunking's modes)."""
    from dataclasses import replace

    from lamp_ros.ops.chunker import merge_settings
    from lamp_ros.spec import load_spec
    spec = load_spec(spec_path)
    if not merge_mode:
        return spec
    chunker = merge_settings(merge_mode, spec.control.get('chunker', {}))
    return replace(spec, control={**spec.control, 'chunker': chunker})


def controller_for(path: str | None, merge_mode: str | None = None, expert: bool = False,
                   world=None):
    """(controller, its camera slots, its name): an artifact through its Runtime, a spec's
    eager policy (a .yaml path), or the scripted expert (at the artifact's rate and max step,
    or, in a physics world without an artifact, at 22 Hz within the world's robot limits).
    `merge_mode` overrides the chunk merge, as the node's chunk_merge_mode does."""
    if expert and path is None:
        if world is None:
            raise ValueError('the scripted expert needs an artifact (its rate and max step) '
                             'or a world (--world)')
        return (ExpertController(22.0, len(world.robot.joints),
                                 [j.max_step for j in world.robot.joints]), (), 'expert')
    if path.endswith(('.yaml', '.yml')):
        from lamp_ros.trace.from_spec import build_pipeline
        spec = spec_with_merge_mode(path, merge_mode)
        pipeline = build_pipeline(spec)
        return EagerController(pipeline), pipeline.interface.camera_slots, f'{spec.name} (eager)'
    from lamp_ros.runtime import Runtime
    from lamp_ros.ops.chunker import merge_settings
    runtime = Runtime.load(path, overrides={'chunker': merge_settings(merge_mode)}
                           if merge_mode else None)
    if expert:
        clamp = next((n.attrs for n in runtime.artifact.graph.nodes if n.op == 'clamp'), {})
        return (ExpertController(runtime.rate_hz, len(runtime.joint_names),
                                 clamp.get('max_step', 0.15)), (), 'expert')
    return ArtifactController(runtime), runtime.camera_slots, runtime.id[:12]


def check_fits(controller, joint_names, env) -> None:
    """The controller drives the world's robot: the same joints, in the same order."""
    if env.joint_names is None:
        return
    if joint_names is not None and tuple(joint_names) != tuple(env.joint_names):
        raise ValueError(f'the policy drives joints {list(joint_names)}, world {env.name}\'s '
                         f'robot has {list(env.joint_names)}: build it for the world\'s robot '
                         f'file')
    if controller.joints != env.joints:
        raise ValueError(f'the policy drives {controller.joints} joints, world {env.name}\'s '
                         f'robot has {env.joints}')


def _thumbnail(frame: np.ndarray) -> np.ndarray:
    import cv2
    height = max(1, round(frame.shape[0] * STRIP_WIDTH / frame.shape[1]))
    return cv2.resize(frame, (STRIP_WIDTH, height), interpolation=cv2.INTER_AREA)


def run_episode(controller, env, index: int, seconds: float, latency_ticks: int = 0,
                prompt: str = DEFAULT_PROMPT, slots=None, transform=None,
                strip_slot: str | None = None) -> Episode:
    """One closed-loop episode on the world's timeline. `transform(observation) ->
    observation`, if given, changes what the controller sees (a miswired camera or joint
    order, to show that the evaluation notices). `strip_slot`: keep STRIP_FRAMES small frames
    of that camera over the episode."""
    period = 1.0 / controller.rate_hz
    slots = tuple(env.slots if slots is None else slots)
    env.reset(index)
    controller.reset()
    target = env.state()
    frames, frame_t = {}, -1.0
    pending = deque()
    errors, commands, boundaries, strip = [], [], [], []
    ticks = int(round(seconds * controller.rate_hz))
    strip_ticks = set(np.linspace(1, ticks, STRIP_FRAMES).round().astype(int)) \
        if strip_slot else set()
    for k in range(1, ticks + 1):
        t = k * period
        env.advance(t, target)
        q = env.state()
        if slots and (frame_t < 0 or t - frame_t >= 1.0 / env.camera_rate_hz - 1e-9):
            frame_t = t
            frames = env.frames(slots, t)
        if k in strip_ticks:
            strip.append((t, _thumbnail(frames[strip_slot] if strip_slot in frames else
                                        env.frames((strip_slot,), t)[strip_slot])))
        observation = {'images': dict(frames), 'state': q.astype(np.float32), 'prompt': prompt}
        pending.append((transform(observation) if transform else observation, frame_t))
        observation, t_obs = pending[0] if len(pending) > latency_ticks else pending[-1]
        if len(pending) > latency_ticks:
            pending.popleft()
        command, fresh_chunk = controller(observation, t, t_obs, env.task, q)
        if command is not None:
            target = np.asarray(command, np.float64)
            commands.append(target.copy())
            if fresh_chunk:
                boundaries.append(len(commands) - 1)
        errors.append(env.error(t))
    last = max(1, int(round(controller.rate_hz)))
    return Episode(index, bool(env.succeeded(errors, controller.rate_hz)), float(np.mean(errors)),
                   float(np.mean(errors[-last:])), errors, commands, boundaries, strip,
                   env.outcome(errors, controller.rate_hz))


def smoothness(episode: Episode, rate_hz: float) -> dict:
    """RMS jerk of the commands (third difference / period^3), the largest change between
    consecutive commands at chunk boundaries, and the largest kink there (the change of that
    step from the one before: c[i] - 2 c[i-1] + c[i-2], rad)."""
    c = np.asarray(episode.commands, np.float64)
    if len(c) < 4:
        return {'rms_jerk': float('nan'), 'max_boundary_jump': float('nan'),
                'max_boundary_kink': float('nan')}
    jerk = np.diff(c, n=3, axis=0) * rate_hz ** 3
    jumps = [np.abs(c[i] - c[i - 1]).max() for i in episode.boundaries if i > 0]
    kinks = [np.abs(c[i] - 2 * c[i - 1] + c[i - 2]).max() for i in episode.boundaries if i > 1]
    return {'rms_jerk': float(np.sqrt(np.mean(jerk ** 2))),
            'max_boundary_jump': float(max(jumps)) if jumps else 0.0,
            'max_boundary_kink': float(max(kinks)) if kinks else 0.0}


def success_interval(successes: int, episodes: int, z: float = 1.96) -> list:
    """Wilson score interval of a success rate (95% for z = 1.96): [low, high]. Unlike the
    normal approximation it stays within [0, 1] and is not empty at 0 or 100%."""
    if episodes <= 0:
        return [0.0, 1.0]
    p = successes / episodes
    denominator = 1 + z * z / episodes
    centre = (p + z * z / (2 * episodes)) / denominator
    half = z * math.sqrt(p * (1 - p) / episodes + z * z / (4 * episodes ** 2)) / denominator
    return [max(0.0, centre - half), min(1.0, centre + half)]


def report_of(runs: list, rate_hz: float, env_name: str, unit: str, seconds: float,
              latency_ticks: int, seed: int) -> dict:
    """Episodes (in index order) -> the report (plain data; `per_episode` holds one entry
    each)."""
    smooth = [smoothness(e, rate_hz) for e in runs]
    successes = sum(e.success for e in runs)
    return {
        'success_rate': successes / max(1, len(runs)),
        'success_ci': success_interval(successes, len(runs)),
        'episodes': len(runs),
        'mean_error': float(np.mean([e.mean_error for e in runs])),
        'error_unit': unit,
        'rms_jerk': float(np.nanmean([s['rms_jerk'] for s in smooth])),
        'max_boundary_jump': float(np.nanmax([s['max_boundary_jump'] for s in smooth])),
        'max_boundary_kink': float(np.nanmax([s['max_boundary_kink'] for s in smooth])),
        'world': env_name, 'latency_ticks': latency_ticks, 'seconds': seconds, 'seed': seed,
        'per_episode': [{'index': e.index, 'success': e.success, 'outcome': e.outcome,
                         'mean_error': e.mean_error, 'final_error': e.final_error, **s,
                         'errors': [round(x, 4 if unit == 'm' else 2) for x in e.errors]}
                        for e, s in zip(runs, smooth)],
    }


def describe_episode(episode: Episode, unit: str) -> str:
    return (f'{"success" if episode.success else "fail"} ({episode.outcome}), mean error '
            f'{episode.mean_error:.3g} {unit}')


def evaluate(controller, episodes: int = 10, seconds: float | None = None,
             latency_ticks: int = 0, seed: int = 0, slots=None, progress=None, transform=None,
             env=None, joint_names=None) -> dict:
    """Closed-loop episodes in this process -> the report. `env`: the world (default: the 2D
    scene with the controller's joint count); `seconds`: the world's episode length if None.
    (`lamp eval` runs them through parallel.run_episodes, which also keeps frame strips.)"""
    env = env or SceneWorld(controller.joints, seed)
    check_fits(controller, joint_names, env)
    seconds = env.default_seconds if seconds is None else seconds
    runs = []
    for i in range(episodes):
        episode = run_episode(controller, env, i, seconds, latency_ticks, slots=slots,
                              transform=transform)
        runs.append(episode)
        if progress:
            progress(f'episode {i + 1}/{episodes}: {describe_episode(episode, env.unit)}')
    return report_of(runs, controller.rate_hz, env.name, env.unit, seconds, latency_ticks, seed)


def compare(a: dict, b: dict) -> dict:
    """Two reports over the same episodes (same seed and count) side by side: success and
    error of each, B minus A, and the episodes only one of them solved."""
    if [e['index'] for e in a['per_episode']] != [e['index'] for e in b['per_episode']] or \
            a['seed'] != b['seed'] or a['seconds'] != b['seconds'] or \
            a.get('world') != b.get('world'):
        raise ValueError('compare: the reports ran different episodes (world, seed, count or '
                         'length)')
    keys = ('success_rate', 'mean_error', 'rms_jerk', 'max_boundary_jump', 'max_boundary_kink')
    pairs = list(zip(a['per_episode'], b['per_episode']))
    return {'a': {k: a[k] for k in keys}, 'b': {k: b[k] for k in keys},
            'delta': {k: b[k] - a[k] for k in keys},
            'only_a_succeeded': [x['index'] for x, y in pairs
                                 if x['success'] and not y['success']],
            'only_b_succeeded': [x['index'] for x, y in pairs
                                 if y['success'] and not x['success']],
            'episodes': len(pairs), 'seed': a['seed'], 'latency_ticks': a['latency_ticks']}
