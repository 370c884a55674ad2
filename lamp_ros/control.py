"""One control tick around any policy: chunker -> smoother -> safety clamp.

The policy produces chunks of actions; the robot needs one command per tick. `ControlPipeline`
is the eager reference of that per-tick path, including its state (the current plan, the
filter memory, the last command), and is what the tracer runs to get the whole-pipeline graph:
observation and tick time in, one safe command out. Inference happens only on the ticks where
the chunker asks for a new chunk.

What it asks of the policy (docs/own-policy.md): `interface` (observation.PolicyInterface: its
cameras, joints, whether it reads a prompt), `infer(observation) -> chunk` in robot units,
`reset()`, and optionally `example_observation(seed=, prompt=)` where the interface's own
examples (observation.PolicyInterface.example_observation) will not do.
"""

import numpy as np

from lamp_ros.observation import validate_observation
from lamp_ros.ops.chunker import ActionChunker
from lamp_ros.ops.clamp import SafetyClamp
from lamp_ros.ops.delta import check_mask, delta_to_absolute
from lamp_ros.ops.smoother import Smoother
from lamp_ros.trace.stage import as_numpy, stage


class ControlPipeline:
    """`tick(observation, t) -> command` with episode state; `reset()` starts an episode."""

    def __init__(self, policy, chunker: ActionChunker, smoother: Smoother, clamp: SafetyClamp,
                 rate_hz: float):
        joints = len(policy.interface.joint_names)
        for name, op in (('chunker', chunker), ('smoother', smoother), ('clamp', clamp)):
            if op.joints != joints:
                raise ValueError(f'control.{name}: {op.joints} joints, the policy has {joints}')
        self.policy = policy
        self.chunker = chunker
        self.smoother = smoother
        self.clamper = clamp
        self.rate_hz = rate_hz
        self.delta_mask = None   # actions relative to the state (set_delta_mask)
        self.state = {}
        self.reset()

    def set_delta_mask(self, mask) -> None:
        """The policy's actions are deltas for the joints `mask` marks (a robot's `action:
        {kind: delta}`): the state the chunk was computed from is added to them."""
        self.delta_mask = None if mask is None else tuple(
            bool(m) for m in check_mask(mask, len(self.policy.interface.joint_names)))

    def reset(self) -> None:
        """New episode: empty plan, fresh filters, no previous command, noise counter at 0."""
        self.state = {'chunker': self.chunker.init_state(),
                      'smoother': self.smoother.init_state(),
                      'clamp': self.clamper.init_state()}
        self.policy.reset()

    @stage('delta_to_absolute', 'postprocess', outputs=('chunk',),
           attrs=lambda self: {'mask': list(self.delta_mask)})
    def to_absolute(self, chunk, state: np.ndarray) -> np.ndarray:
        """Deltas -> absolute positions for the masked joints (ops/delta.py)."""
        return delta_to_absolute(as_numpy(chunk), state, self.delta_mask)

    @stage('chunker', 'stateful', outputs=('action',), state='chunker',
           attrs=lambda self: self.chunker.to_dict())
    def chunk_action(self, chunk, t_obs: float, t: float) -> np.ndarray:
        """Merge a new chunk (if any) into the plan, then pick the action for tick time t."""
        state = self.state['chunker']
        if chunk is not None:
            # a model stage's chunk: a torch tensor when the policy runs eagerly, numpy in
            # the artifact
            state = self.chunker.merge(state, as_numpy(chunk), t_obs, t)
        action, _ = self.chunker.action_at(state, t)
        self.state['chunker'] = state
        return action

    @stage('smoother', 'stateful', outputs=('action',), state='smoother',
           attrs=lambda self: self.smoother.to_dict())
    def smooth(self, action: np.ndarray, t: float) -> np.ndarray:
        out, self.state['smoother'] = self.smoother.step(self.state['smoother'], action, t)
        return out

    @stage('clamp', 'stateful', outputs=('command',), state='clamp',
           attrs=lambda self: self.clamper.to_dict())
    def clamp(self, action: np.ndarray, reference: np.ndarray) -> np.ndarray:
        out, _, self.state['clamp'] = self.clamper.step(self.state['clamp'], action, reference)
        return out

    def _infer_rtc(self, obs, t_obs: float, t: float, given):
        """Real-time chunking: trained mode inpaints the committed actions, guided mode pulls
        the chunk toward the previous plan where they overlap (ops/rtc_config.py). `given`:
        (committed, delay, end), a compiled pipeline's graph inputs, instead of the chunker's."""
        settings = self.chunker.rtc
        committed, delay, end = given if given is not None else \
            self.chunker.rtc_inputs(self.state['chunker'], t_obs, t)
        if settings['mode'] == 'trained':
            return self.policy.infer(obs, committed=committed, delay=delay)
        return self.policy.infer(obs, committed=committed, delay=delay, guidance={
            'end': end, 'schedule': settings['prefix_schedule'],
            'max_weight': settings['max_guidance_weight']})

    @property
    def interface(self):
        return self.policy.interface

    def example_observation(self, seed: int = 0, prompt: str | None = None) -> dict:
        """What tracing and parity feed the pipeline: the policy's own example
        (`policy.example_observation`) if it has one, else its interface's."""
        make = getattr(self.policy, 'example_observation', None) or \
            self.policy.interface.example_observation
        return make(seed=seed) if prompt is None else make(seed=seed, prompt=prompt)

    def needs_chunk(self, t: float) -> bool:
        return self.chunker.needs_chunk(self.state['chunker'], t)

    def tick(self, observation, t: float, t_obs=None, rtc=None) -> np.ndarray:
        """Synchronous tick: infer if the chunker asks, then the command for time t.

        t_obs is when the observation was taken (the camera stamp); a chunk computed from it
        is aligned to that time, so actions already due are dropped. Defaults to t. With
        merge_mode rtc the chunk is generated around the actions the plan commits from t_obs
        to t (`rtc`: (committed (H, J), delay, end) given instead, as a compiled pipeline's
        graph inputs are).
        """
        policy, interface = self.policy, self.policy.interface
        obs = validate_observation(observation, interface.camera_slots,
                                   len(interface.joint_names), interface.prompt)
        t_obs = t if t_obs is None else t_obs
        chunk = None
        if self.needs_chunk(t):
            if self.chunker.merge_mode == 'rtc':  # around the actions committed meanwhile
                chunk = self._infer_rtc(obs, t_obs, t, rtc)
            else:
                chunk = policy.infer(obs)
        if chunk is not None and self.delta_mask is not None:
            chunk = self.to_absolute(chunk, obs.state)
        action = self.chunk_action(chunk, t_obs, t)
        return self.clamp(self.smooth(action, t), obs.state)


def control_pipeline(policy, control: dict) -> ControlPipeline:
    """The policy in its control pipeline, its chunker, smoother and clamp built from a spec's
    `control:` section (rate_hz, chunker, smoother, clamp) and the policy's interface (its
    joints and action horizon): what a policy's entry function usually returns."""
    interface = policy.interface
    joints, rate_hz = len(interface.joint_names), float(control['rate_hz'])
    if 'clamp' not in control:
        raise ValueError('control.clamp: missing (the joint limits and the max step per tick '
                         'the robot accepts)')
    chunker = ActionChunker.from_dict({'horizon': interface.action_horizon, 'joints': joints,
                                       'dt': 1.0 / rate_hz, **control.get('chunker', {})})
    if chunker.merge_mode == 'rtc':
        mode = chunker.rtc['mode']
        if mode not in getattr(policy, 'supports_rtc', ()):
            raise ValueError(f'control.chunker.rtc.mode {mode}: {type(policy).__name__} cannot '
                             'generate a chunk around committed actions that way (it runs '
                             f'{tuple(getattr(policy, "supports_rtc", ()))}; a policy declares '
                             'supports_rtc = (modes) and takes infer(observation, '
                             'committed=..., delay=...))')
    smoother = Smoother.from_dict({'joints': joints, **control.get('smoother', {})})
    return ControlPipeline(policy, chunker, smoother, SafetyClamp.from_dict(control['clamp']),
                           rate_hz)
