"""The node's parameters: names, defaults, documentation and validation, in one table.

config/vla.yaml sets the same names; `describe()` feeds the ParameterDescriptors so
`ros2 param describe` shows the documentation.
"""

from dataclasses import dataclass

from lamp_ros.ops.chunker import merge_settings

DEFAULT_CAMERAS = ['']  # one topic per camera slot: the artifact's robot's, or /camera/<slot>/...

PARAMETERS = {
    'artifact': ('artifacts/pi05_tiny', 'path of the compiled artifact directory'),
    'device': ('', 'runtime device; empty: the artifact target default (cpu, cuda:0)'),
    'rate_hz': (0.0, 'control rate: one command per tick; 0: the artifact\'s (abi.rate_hz)'),
    'cameras': (DEFAULT_CAMERAS, 'camera topics as "topic=slot" (slots from the artifact ABI); '
                                 '[""]: the artifact robot\'s cameras, else '
                                 '/camera/<slot>/image_raw for each slot'),
    'image_transport': ('', 'raw (sensor_msgs/Image) or compressed (CompressedImage on '
                            '<topic>/compressed) for every camera; "": each robot camera\'s '
                            'encoding (raw without a robot)'),
    'joint_states_topic': ('/joint_states', 'sensor_msgs/JointState input'),
    'joint_names': ([''], 'the robot joint of each action dimension, in order (a remap); '
                          '[""]: the artifact\'s joints'),
    'prompt': ('pick up the red cube and place it in the bowl', 'task prompt'),
    'max_obs_age_s': (0.5, 'inputs older than this are stale: hold and report'),
    'max_skew_s': (0.25, 'max spread of the camera stamps in one observation'),
    'output': ('joint_trajectory', 'joint_trajectory (trajectory_msgs/JointTrajectory) or '
                                   'float64_multi_array (std_msgs/Float64MultiArray)'),
    'output_topic': ('', 'empty: ~/joint_trajectory or ~/commands by output'),
    'trajectory_points': (1, 'points per JointTrajectory: 1, the command alone; N > 1, the '
                             'command then the plan, timed at the control period, with '
                             'velocities, stamped with the tick time'),
    'dry_run': (False, 'run everything but publish commands on ~/dry_run/<topic> only, never '
                       'on the command topic'),
    'hold_mode': ('position', 'what ~/hold publishes: position (the joints where they are, '
                              'every tick until ~/resume) or empty (one empty trajectory)'),
    'chunk_merge_mode': ('', 'override: latest | temporal_ensemble | crossfade | rtc (an '
                         'artifact built for it); empty: artifact'),
    'chunk_replan_at': (0, 'override: new chunk when fewer actions remain; 0: artifact'),
    'smoothing_mode': ('', 'override: none | ema | one_euro; empty: artifact'),
    'smoothing_alpha': (0.0, 'override: EMA weight of the new sample; 0: artifact'),
    'clamp_max_step': (0.0, 'override: max change per tick for every joint; 0: artifact'),
    'on_fault': ('hold', 'hold (repeat the last safe command) or silent (publish nothing)'),
    'execution': ('async', 'async (inference in a worker, ticks never wait) or sync'),
    'inference_threads': (1, 'CPU threads for compiled groups; leave cores to the control '
                             'loop and the drivers (0: all cores)'),
    'autostart': (False, 'configure and activate by itself (no lifecycle manager)'),
}

CHOICES = {'image_transport': ('', 'raw', 'compressed'),
           'output': ('joint_trajectory', 'float64_multi_array'),
           'on_fault': ('hold', 'silent'), 'execution': ('async', 'sync'),
           'chunk_merge_mode': ('', 'latest', 'temporal_ensemble', 'crossfade', 'rtc'),
           'smoothing_mode': ('', 'none', 'ema', 'one_euro'),
           'hold_mode': ('position', 'empty')}
POSITIVE = ('max_obs_age_s', 'max_skew_s', 'trajectory_points')


def check(name: str, value) -> str:
    """'' when the value is acceptable, else the reason (for SetParametersResult)."""
    if name in CHOICES and value not in CHOICES[name]:
        return f'{name}: {value!r} not in {CHOICES[name]}'
    if name in POSITIVE and not value > 0:
        return f'{name}: must be > 0, got {value}'
    if name in ('rate_hz', 'chunk_replan_at', 'smoothing_alpha', 'clamp_max_step',
                'inference_threads') and value < 0:
        return f'{name}: must be >= 0 (0 keeps the artifact value), got {value}'
    if name == 'cameras' and list(value) != DEFAULT_CAMERAS:
        bad = [c for c in value if c.count('=') != 1 or not all(c.split('='))]
        if bad:
            return f'cameras: entries must be "topic=slot", got {bad}'
    return ''


@dataclass(frozen=True)
class NodeConfig:
    """The parameters as read at configure time."""

    values: dict

    def __getattr__(self, name):
        try:
            return self.values[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    def camera_topics(self, slots, robot_cameras: dict | None = None) -> dict:
        """slot -> (topic, compressed). Left at their defaults, the parameters follow the
        artifact: its robot's cameras (`robot_cameras`: slot -> {topic, encoding}: jpeg and png
        are CompressedImage on exactly that topic), else /camera/<slot>/image_raw for every
        slot of `slots`. `cameras` ("topic=slot") remaps topics; `image_transport` set to raw
        or compressed applies to every camera (compressed: on <topic>/compressed)."""
        transport = self.values['image_transport']
        robot_cameras = robot_cameras or {}
        if list(self.values['cameras']) != DEFAULT_CAMERAS:
            pairs = [c.split('=') for c in self.values['cameras']]
        elif robot_cameras:
            pairs = [(c['topic'], slot) for slot, c in robot_cameras.items()]
        else:
            pairs = [(f'/camera/{slot}/image_raw', slot) for slot in slots]
        out = {}
        for topic, slot in pairs:
            if transport:
                compressed = transport == 'compressed'
                if compressed and not topic.endswith('/compressed'):
                    topic += '/compressed'
            else:
                compressed = robot_cameras.get(slot, {}).get('encoding') in ('jpeg', 'png')
            out[slot] = (topic, compressed)
        return out

    def overrides(self) -> dict:
        """Runtime overrides of the stateful operators from the non-default parameters."""
        out = {}
        if self.values['chunk_merge_mode']:
            out['chunker'] = merge_settings(self.values['chunk_merge_mode'])
        if self.values['chunk_replan_at']:
            out.setdefault('chunker', {})['replan_at'] = self.values['chunk_replan_at']
        if self.values['smoothing_mode']:
            out.setdefault('smoother', {})['mode'] = self.values['smoothing_mode']
        if self.values['smoothing_alpha']:
            out.setdefault('smoother', {})['alpha'] = self.values['smoothing_alpha']
        if self.values['clamp_max_step']:
            out['clamp'] = {'max_step': self.values['clamp_max_step']}
        return out
