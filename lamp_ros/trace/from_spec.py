"""Trace a model spec: build its eager pipeline, run one tick on an example, return the Graph."""

import importlib

import numpy as np

from lamp_ros.graph.types import TensorType
from lamp_ros.observation import validate_observation
from lamp_ros.spec.robot import check_robot_fits
from lamp_ros.trace.tracer import trace


def build_pipeline(spec, device: str = 'cpu'):
    """Call the spec's `policy.entry` ('module:function') with the spec; a spec's robot is
    checked against the interface the policy declares, and delta actions put in place."""
    entry = spec.policy.get('entry', '')
    module_name, _, func_name = entry.partition(':')
    try:
        factory = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f'policy.entry: cannot load {entry!r} ({exc})') from exc
    pipeline = factory(spec, device=device)
    if spec.robot is not None:
        check_robot_fits(spec.robot, pipeline.interface)
        pipeline.set_delta_mask(spec.robot.delta_mask)
    return pipeline


def image_input_types(slots) -> dict:
    """Raw camera images vary in size between robots and calls: symbolic H and W."""
    return {f'images.{s}': TensorType('uint8', (f'{s}_h', f'{s}_w', 3), layout='hwc',
                                      role='input') for s in slots}


def trace_pipeline(pipeline, observation, t: float = 0.0, export: bool = True, name: str = '',
                   progress=None, values_out: dict | None = None, hash_weights: bool = True,
                   rtc=None):
    """One synchronous tick of `pipeline` at time t, traced into a Graph (state reset after);
    `hash_weights` as `trace`'s. A pipeline whose chunker merges by real-time chunking gets
    more graph inputs, `committed` (H, J) and `delay`, and `guidance_end` in guided mode (the
    runtime makes them from its chunker's plan and the measured latency); `rtc` = (committed,
    delay, end) gives their values (an empty plan's by default: no delay)."""
    policy, interface = pipeline.policy, pipeline.interface
    chunker = getattr(pipeline, 'chunker', None)
    mode = getattr(chunker, 'merge_mode', None)
    obs = validate_observation(observation, interface.camera_slots, len(interface.joint_names),
                               interface.prompt)
    pipeline.reset()
    # Two distinct objects: the tracer follows values by identity, and the observation time
    # (the camera stamp) is a different input from the tick time even when they are equal.
    inputs = {'images': dict(obs.images), 'state': obs.state,
              **({'prompt': obs.prompt} if interface.prompt else {}),
              't': float(t), 't_obs': np.float64(t)}
    types = image_input_types(obs.images)
    types['t'] = TensorType('float64', (), role='input')
    types['t_obs'] = TensorType('float64', (), role='input')
    if mode == 'rtc':
        committed, delay, end = rtc if rtc is not None else \
            chunker.rtc_inputs(chunker.init_state(), t, t)
        inputs.update(committed=np.array(committed, np.float32), delay=np.int64(delay))
        types['delay'] = TensorType('int64', (), role='input')
        if chunker.rtc['mode'] == 'guided':
            inputs['guidance_end'] = np.int64(end)
            types['guidance_end'] = TensorType('int64', (), role='input')

    def run(images, state, t, t_obs, prompt=None, committed=None, delay=None,
            guidance_end=None):
        observed = {'images': images, 'state': state}
        if interface.prompt:
            observed['prompt'] = prompt
        return pipeline.tick(observed, t, t_obs, rtc=None if committed is None else
                             (committed, delay, guidance_end))

    try:
        return trace(run, inputs, objects=[pipeline, policy], input_types=types, export=export,
                     name=name, progress=progress, values_out=values_out,
                     hash_weights=hash_weights)
    finally:
        pipeline.reset()


def trace_spec(spec, export: bool = True, progress=None, example_seed: int = 0):
    """The stage graph of a spec, traced on the pipeline's example observation."""
    pipeline = build_pipeline(spec)
    if progress:
        progress(f'tracing {spec.name}')
    obs = pipeline.example_observation(seed=example_seed)
    return trace_pipeline(pipeline, obs, export=export, name=spec.name, progress=progress)
