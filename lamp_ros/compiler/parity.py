"""Parity evidence: the compiled artifact against the eager Python reference.

For N example observations, the eager pipeline is traced (which records the value on every
edge) and the artifact runs the same tick through the Runtime (which records every value it
computes). They are compared at every group boundary and at the graph outputs: max abs error,
max relative error (max abs / max |reference|), and pass/fail against the spec's tolerance
(numpy allclose: |a - b| <= atol + rtol * |b|). Integer and boolean values must match exactly.
The inputs and the eager outputs are stored too, so `lamp verify` can re-run parity later
without torch.

A compiler rewrite can hand a group values the eager pipeline never computes (the device
letterbox's frames and tables, compiler/device_letterbox.py): those are listed as not compared,
with the reason, and everything computed from them is compared as before. A value that stands
for an eager one under another name (a node's `eager_values` attr: `letterbox_frames.image_mask`
for `stack_cameras.image_mask`) is compared with that one.

Every third sample goes without its last camera (where there is more than one), because a
camera that drops out on the robot must be handled by the artifact as by the eager policy. A
policy that needs every camera turns that off in its spec (`parity: {missing_camera: false}`);
one that fails on such a sample gets an error that names the camera and that key.
"""

import numpy as np

from lamp_ros.artifact.compare import compare, to_numpy
from lamp_ros.observation import DEFAULT_PROMPT

PROMPTS = (DEFAULT_PROMPT, 'open the top drawer', 'stack the green block on the blue block',
           'push the bowl to the left')
MISSING_CAMERA_EVERY = 3  # every third parity sample lacks its last camera
MISSING_CAMERA_KEY = 'parity.missing_camera'


class ParityError(ValueError):
    """The eager policy or the artifact failed on a parity sample; says which and why."""


def dropped_camera(observation: dict, sample: int, missing_camera: bool = True):
    """The camera parity sample `sample` goes without (every MISSING_CAMERA_EVERY-th, its last
    camera, where it has more than one), or None."""
    images = observation.get('images', {})
    if missing_camera and sample % MISSING_CAMERA_EVERY == MISSING_CAMERA_EVERY - 1 \
            and len(images) > 1:
        return list(images)[-1]
    return None


def parity_observations(pipeline, samples: int, missing_camera: bool = True) -> list:
    """Varied but deterministic observations from the pipeline's example: seeds, prompts, and
    (`missing_camera`, the spec's parity.missing_camera) every third without its last camera
    (where it has more than one), so that the artifact is checked on a camera that drops out
    as the eager policy handles it."""
    return [obs for obs, _ in parity_samples(pipeline, samples, missing_camera)]


def parity_samples(pipeline, samples: int, missing_camera: bool = True) -> list:
    """[(observation, the camera it goes without or None)], parity_observations'."""
    out = []
    for i in range(samples):
        prompt = PROMPTS[i % len(PROMPTS)] if pipeline.interface.prompt else None
        obs = pipeline.example_observation(seed=100 + i, prompt=prompt)
        dropped = dropped_camera(obs, i, missing_camera)
        if dropped is not None:
            obs['images'].pop(dropped)
        out.append((obs, dropped))
    return out


def parity_committed(pipeline, observation, sample: int):
    """Real-time chunking's inputs for parity sample `sample` ((committed (H, J), delay, end)),
    or None where the pipeline does not merge by rtc: delays 0, 5, 10, ... (wrapping at half
    the chunk), the pull of guided mode ending 20 actions later, and a previous plan that stays
    near the observed state, so both the plain and the conditioned denoising are compared."""
    chunker = getattr(pipeline, 'chunker', None)
    if getattr(chunker, 'merge_mode', None) != 'rtc':
        return None
    delay = (5 * sample) % max(chunker.horizon // 2, 1)
    steps = np.arange(chunker.horizon, dtype=np.float32)[:, None]
    joints = np.arange(chunker.joints, dtype=np.float32)[None, :]
    state = np.asarray(observation['state'], np.float32)[None, :]
    committed = state + 0.05 * np.sin(0.2 * steps + joints)
    return (committed.astype(np.float32), np.int64(delay),
            np.int64(min(delay + 20, chunker.horizon)))


def boundary_values(plan, graph) -> list:
    """Values handed from one group to another, plus the graph outputs, in plan order."""
    names = []
    for group in plan.groups:
        names += [v for v in group.outputs if v not in names]
    return names + [v for v in graph.outputs if v not in names]


def eager_names(graph) -> dict:
    """Artifact value -> the eager pipeline's name for it, where a rewrite renamed it."""
    return {value: eager for node in graph.nodes
            for value, eager in node.attrs.get('eager_values', {}).items()}


def run_parity(pipeline, runtime, samples: int, atol: float, rtol: float, progress=None,
               missing_camera: bool = True):
    """-> (evidence dict, inputs {key: array}, expected {key: array}). `missing_camera`: the
    spec's parity.missing_camera (parity_observations)."""
    from lamp_ros.trace.from_spec import trace_pipeline

    graph, plan = runtime.artifact.graph, runtime.artifact.plan
    names, aliases = boundary_values(plan, graph), eager_names(graph)
    results, inputs, expected, not_compared = [], {}, {}, {}
    for i, (obs, dropped) in enumerate(parity_samples(pipeline, samples, missing_camera)):
        if progress:
            progress(f'parity sample {i + 1}/{samples}' +
                     (f' (without camera {dropped})' if dropped else ''))
        eager, got = {}, {}
        rtc = parity_committed(pipeline, obs, i)
        rtc_feeds = {} if rtc is None else dict(zip(('committed', 'delay', 'end'), rtc))
        try:
            trace_pipeline(pipeline, obs, export=False, values_out=eager, hash_weights=False,
                           rtc=rtc)
            runtime.reset()
            runtime.run(runtime.feeds(obs, 0.0, **rtc_feeds), capture=got)
        except Exception as exc:  # the policy's own code failed: say on which camera
            if dropped is None:
                raise
            raise ParityError(
                f'parity sample {i + 1}/{samples} goes without camera {dropped!r} (every third '
                'sample leaves out the last camera, to check that the artifact handles a camera '
                f'that drops out as the eager policy does) and the policy failed on it: '
                f'{type(exc).__name__}: {exc}. Handle an absent camera (observation.images.get('
                f'{dropped!r})), or, where the policy needs every camera, set '
                f'`{MISSING_CAMERA_KEY}: false` in the spec') from exc
        values = {}
        for name in names:
            reference = aliases.get(name, name)
            if reference not in eager:
                not_compared[name] = ('the eager pipeline does not compute it (made by a '
                                      'compiler rewrite); the values computed from it are '
                                      'compared')
                continue
            if eager.get(reference) is None and got.get(name) is None:
                continue  # a branch absent in both (missing camera)
            values[name] = compare(to_numpy(got.get(name)), to_numpy(eager.get(reference)),
                                   atol, rtol)
        results.append({'sample': i, 'prompt': obs.get('prompt'),
                        'cameras': sorted(obs['images']), 'values': values,
                        'passed': all(v['passed'] for v in values.values())})
        for slot, img in obs['images'].items():
            inputs[f'{i}/images.{slot}'] = img
        inputs[f'{i}/state'] = np.asarray(obs['state'], np.float32)
        if rtc is not None:
            inputs[f'{i}/committed'] = rtc[0]
            inputs[f'{i}/rtc_delay_end'] = np.array(rtc[1:], np.int64)
        for name in graph.outputs:
            expected[f'{i}/{name}'] = np.asarray(to_numpy(eager[name]))
    worst = {}
    for r in results:
        for name, v in r['values'].items():
            w = worst.setdefault(name, {'max_abs': 0.0, 'max_rel': 0.0, 'passed': True})
            w['max_abs'] = max(w['max_abs'], v.get('max_abs', 0.0))
            w['max_rel'] = max(w['max_rel'], v.get('max_rel', 0.0))
            w['passed'] = w['passed'] and v['passed']
    evidence = {'tolerance': {'atol': atol, 'rtol': rtol}, 'samples': results,
                'worst': worst, 'not_compared': not_compared,
                'passed': all(r['passed'] for r in results),
                'prompts': [r['prompt'] for r in results], 't': 0.0}
    return evidence, inputs, expected
