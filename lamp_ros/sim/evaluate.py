"""`lamp eval`: closed-loop episodes of the simulator's task (task.py), in one process.

Each episode runs on the simulator's own timeline, with no wall clock: joint states at 50 Hz
following the last command with the simulator's first-order lag, camera frames at 10 Hz
rendered from the arm's current pose and the episode's cube, and control ticks at the
artifact's rate through the same Runtime as the node (chunker, smoother and clamp included).
`latency_ticks` D feeds each tick the observation of D ticks earlier, as an inference that
takes D periods would see it. Per episode: the error over time, success (task.succeeded), and
the command's smoothness, RMS jerk and the largest jump between consecutive commands at the
ticks where a new chunk came in (chunk boundaries), and the largest kink there: the change of
that step from the step before (a second difference), which a smooth motion does not have
however fast it moves, so it tells a discontinuity at a boundary from the arm's own speed. The
scripted expert runs through the same loop for reference.
"""

from collections import deque
from dataclasses import dataclass
import json
import os

import numpy as np

from lamp_ros.observation import DEFAULT_PROMPT
from lamp_ros.sim.dynamics import follow
from lamp_ros.sim.scene import render
from lamp_ros.sim.task import ReachTask, succeeded

JOINT_RATE_HZ = 50.0
CAMERA_RATE_HZ = 10.0
TAU_S = 0.15            # the simulator's joint lag (sim/robot.py)
FRAME = (240, 320)      # the simulated cameras' frames (height, width)


@dataclass
class Episode:
    index: int
    success: bool
    mean_error: float
    final_error: float
    errors: list
    commands: list
    boundaries: list     # tick indices where a new chunk came in


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


def controller_for(path: str, merge_mode: str | None = None, expert: bool = False):
    """(controller, its camera slots, its name): an artifact through its Runtime, a spec's
    eager policy (a .yaml path), or the scripted expert at the artifact's rate and max step.
    `merge_mode` overrides the chunk merge, as the node's chunk_merge_mode does."""
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
                                 clamp.get('max_step', 0.15)), runtime.camera_slots, 'expert')
    return ArtifactController(runtime), runtime.camera_slots, runtime.id[:12]


def run_episode(controller, task: ReachTask, index: int, seconds: float,
                latency_ticks: int = 0, prompt: str = DEFAULT_PROMPT, slots=None,
                transform=None) -> Episode:
    """One closed-loop episode on the simulator's timeline. `transform(observation) ->
    observation`, if given, changes what the controller sees (a miswired camera or joint
    order, to show that the evaluation notices)."""
    period = 1.0 / controller.rate_hz
    slots = tuple(slots or ('base', 'left_wrist', 'right_wrist'))
    q = np.zeros(controller.joints)
    target = q.copy()
    controller.reset()
    frames, frame_t = {}, -1.0
    joint_t = 0.0
    pending = deque()
    errors, commands, boundaries = [], [], []
    for k in range(1, int(round(seconds * controller.rate_hz)) + 1):
        t = k * period
        while joint_t + 1.0 / JOINT_RATE_HZ <= t + 1e-9:  # the joints move until tick time
            joint_t += 1.0 / JOINT_RATE_HZ
            q = follow(q, target, 1.0 / JOINT_RATE_HZ, TAU_S)
        if frame_t < 0 or t - frame_t >= 1.0 / CAMERA_RATE_HZ - 1e-9:
            frame_t = t
            frames = {slot: render(slot, FRAME[1], FRAME[0], t, q, task.cube_x(t))
                      for slot in slots}
        observation = {'images': dict(frames), 'state': q.astype(np.float32), 'prompt': prompt}
        pending.append((transform(observation) if transform else observation, frame_t))
        observation, t_obs = pending[0] if len(pending) > latency_ticks else pending[-1]
        if len(pending) > latency_ticks:
            pending.popleft()
        command, fresh_chunk = controller(observation, t, t_obs, task, q)
        if command is not None:
            target = np.asarray(command, np.float64)
            commands.append(target.copy())
            if fresh_chunk:
                boundaries.append(len(commands) - 1)
        errors.append(task.error_px(t, q))
    last = max(1, int(round(controller.rate_hz)))
    return Episode(index, succeeded(errors, controller.rate_hz), float(np.mean(errors)),
                   float(np.mean(errors[-last:])), errors, commands, boundaries)


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


def evaluate(controller, episodes: int = 10, seconds: float = 10.0, latency_ticks: int = 0,
             seed: int = 0, slots=None, progress=None, transform=None) -> dict:
    """Closed-loop episodes -> the report (plain data; `episodes` holds one entry each)."""
    runs = []
    for i in range(episodes):
        episode = run_episode(controller, ReachTask.episode(seed, i), i, seconds,
                              latency_ticks, slots=slots, transform=transform)
        runs.append(episode)
        if progress:
            progress(f'episode {i + 1}/{episodes}: {"success" if episode.success else "fail"}, '
                     f'mean error {episode.mean_error:.1f} px')
    smooth = [smoothness(e, controller.rate_hz) for e in runs]
    return {
        'success_rate': float(np.mean([e.success for e in runs])),
        'mean_error': float(np.mean([e.mean_error for e in runs])),
        'rms_jerk': float(np.nanmean([s['rms_jerk'] for s in smooth])),
        'max_boundary_jump': float(np.nanmax([s['max_boundary_jump'] for s in smooth])),
        'max_boundary_kink': float(np.nanmax([s['max_boundary_kink'] for s in smooth])),
        'latency_ticks': latency_ticks, 'seconds': seconds, 'seed': seed,
        'episodes': [{'index': e.index, 'success': e.success, 'mean_error': e.mean_error,
                      'final_error': e.final_error, **s, 'errors': [round(x, 2) for x in e.errors]}
                     for e, s in zip(runs, smooth)],
    }


def compare(a: dict, b: dict) -> dict:
    """Two reports over the same episodes (same seed and count) side by side: success and
    error of each, B minus A, and the episodes only one of them solved."""
    if [e['index'] for e in a['episodes']] != [e['index'] for e in b['episodes']] or \
            a['seed'] != b['seed'] or a['seconds'] != b['seconds']:
        raise ValueError('compare: the reports ran different episodes (seed, count or length)')
    keys = ('success_rate', 'mean_error', 'rms_jerk', 'max_boundary_jump', 'max_boundary_kink')
    pairs = list(zip(a['episodes'], b['episodes']))
    return {'a': {k: a[k] for k in keys}, 'b': {k: b[k] for k in keys},
            'delta': {k: b[k] - a[k] for k in keys},
            'only_a_succeeded': [x['index'] for x, y in pairs
                                 if x['success'] and not y['success']],
            'only_b_succeeded': [x['index'] for x, y in pairs
                                 if y['success'] and not x['success']],
            'episodes': len(pairs), 'seed': a['seed'], 'latency_ticks': a['latency_ticks']}


def write_report(report: dict, path: str, title: str) -> str:
    """The JSON, and a PNG of the error over time (one trace per episode) beside it."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from lamp_ros.sim.task import SUCCESS_PX
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)
    picture = path.rsplit('.', 1)[0] + '.png'
    fig, ax = plt.subplots(figsize=(8, 4))
    for e in report['episodes']:
        t = np.arange(1, len(e['errors']) + 1) / (len(e['errors']) / report['seconds'])
        ax.plot(t, e['errors'], lw=1, color='tab:green' if e['success'] else 'tab:red')
    ax.axhline(SUCCESS_PX, ls='--', color='k', lw=0.8)
    ax.set(xlabel='time (s)', ylabel='error (px, 224-wide base camera)',
           title=f'{title}: success {report["success_rate"]:.0%}, mean error '
                 f'{report["mean_error"]:.1f} px')
    fig.tight_layout()
    fig.savefig(picture, dpi=100)
    plt.close(fig)
    return picture
