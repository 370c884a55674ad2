#!/usr/bin/env python3
"""Full-size LeRobot pi05 through lamp, against LeRobot's own inference on the same GPU.

Run on the GPU machine by scripts/device/lerobot_pi05_full.sh (LeRobot 0.6.1 and its pinned
transformers travel as wheels). Three steps, each its own process so their memory is their own:

- `make`: LeRobot's stock pi05 (gemma_2b + gemma_300m + SigLIP So400m, 3 cameras, 14 joints),
  built by LeRobot's own classes on the GPU, its random weights given O(1) activations and
  non-zero adaRMS gates (scripts/fixtures/make_pi05_checkpoints.py `randomize`), saved by
  LeRobot's `save_pretrained` in bf16 mode (vision, projector and norms kept fp32, as LeRobot
  does) with its processor pipelines and stats. The PaliGemma tokenizer is gated and cannot be
  here: the tokenizer is lamp's test tokenizer padded with unused pieces to PaliGemma's 257,152,
  so every id it writes is one PaliGemma's embedding has; token ids are handed to LeRobot's
  model as they are, so both sides see the same inputs.
- `lamp import` + `lamp compile` (target cuda) in between, timed with their peak host memory
  (`peak`).
- `compare`: the same observations (3 cameras at 224 px, a 14-joint state, a task) and the same
  flow noise into lamp's artifact (`Runtime.infer`) and LeRobot's `predict_action_chunk` +
  postprocessor: max |d| and cosine of the normalised and robot-unit actions; then latency p50 /
  p99 of the artifact's inference next to LeRobot's `select_action` (a fresh chunk each call).
"""

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAMERAS = ('base_0_rgb', 'left_wrist_0_rgb', 'right_wrist_0_rgb')
JOINTS = 14
PALIGEMMA_PIECES = 257_152
TASKS = ('Pick_up the RED cube and place it in the bowl', 'fold the towel',
         'open the top drawer, take out the spoon and put it on the plate')


def fixtures():
    """scripts/fixtures/make_pi05_checkpoints.py as a module (randomize, stats)."""
    path = os.path.join(ROOT, 'scripts', 'fixtures', 'make_pi05_checkpoints.py')
    spec = importlib.util.spec_from_file_location('make_pi05_checkpoints', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def padded_tokenizer(out: str, pieces: int = PALIGEMMA_PIECES) -> None:
    """lamp's test tokenizer with unused pieces appended up to PaliGemma's piece count: its
    encodings are unchanged, and every id fits PaliGemma's embedding."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    with open(os.path.join(ROOT, 'test', 'data', 'checkpoints', 'tokenizer.model'), 'rb') as f:
        proto.ParseFromString(f.read())
    for i in range(len(proto.pieces), pieces):
        piece = proto.pieces.add()
        piece.piece, piece.score = f'<unused{i}>', 0.0
        piece.type = pb.ModelProto.SentencePiece.UNUSED
    with open(out, 'wb') as f:
        f.write(proto.SerializeToString())


def make(args) -> None:
    import torch
    from lerobot.configs import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.pi05 import processor_pi05
    from lerobot.policies.pi05.configuration_pi05 import PI05Config
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy

    fx = fixtures()
    start = time.perf_counter()
    if args.smoke:  # the whole path at the fixture's tiny widths on this machine's CPU
        fx.shrink_lerobot()
    padded_tokenizer(args.tokenizer_out, fx.VOCAB if args.smoke else PALIGEMMA_PIECES)
    inputs = {f'observation.images.{cam}': PolicyFeature(FeatureType.VISUAL, (3, 224, 224))
              for cam in CAMERAS}
    inputs['observation.state'] = PolicyFeature(FeatureType.STATE, (JOINTS,))
    config = PI05Config(input_features=inputs, dtype='float32' if args.smoke else 'bfloat16',
                        device=args.device,
                        output_features={'action': PolicyFeature(FeatureType.ACTION, (JOINTS,))},
                        normalization_mapping={'VISUAL': NormalizationMode.IDENTITY,
                                               'STATE': NormalizationMode.QUANTILES,
                                               'ACTION': NormalizationMode.QUANTILES})
    with torch.device(args.device):
        policy = PI05Policy(config)
    fx.randomize(policy, 1)
    print(f'built and randomized in {time.perf_counter() - start:.1f} s', flush=True)
    dataset_stats = {'observation.state': fx.stats(11, JOINTS), 'action': fx.stats(12, JOINTS)}
    torch_stats = {k: {s: torch.from_numpy(v) for s, v in d.items()}
                   for k, d in dataset_stats.items()}
    step_class = processor_pi05.TokenizerProcessorStep

    def local_tokenizer(**kwargs):  # as the fixture generator: the Hub name is kept
        kwargs['tokenizer_name'] = args.tokenizer_dir
        step = step_class(**kwargs)
        step.tokenizer_name = 'google/paligemma-3b-pt-224'
        return step
    processor_pi05.TokenizerProcessorStep = local_tokenizer
    pre, post = processor_pi05.make_pi05_pre_post_processors(config, torch_stats)
    policy.save_pretrained(args.out)
    pre.save_pretrained(args.out)
    post.save_pretrained(args.out)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f'saved {args.out}: {size / 1e9:.2f} GB in {time.perf_counter() - start:.1f} s',
          flush=True)


def peak(args) -> None:
    """Run a command; print its wall time and the peak resident memory of its processes."""
    start = time.perf_counter()
    rc = subprocess.call(args.command)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    record = {'command': args.command[:4], 'rc': rc, 'seconds': round(seconds, 1),
              'peak_rss_gb': round(rss / 1e9, 2)}
    if args.reference:
        ref = sum(os.path.getsize(os.path.join(args.reference, f))
                  for f in os.listdir(args.reference))
        record.update(checkpoint_gb=round(ref / 1e9, 2), peak_over_checkpoint=round(rss / ref, 3))
    print(json.dumps(record), flush=True)
    with open(args.record, 'a', encoding='utf-8') as f:
        f.write(json.dumps(record) + '\n')
    sys.exit(rc)


def observations(seed: int = 3) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for task in TASKS:
        y, x = np.mgrid[0:224, 0:224] / 224
        images = {}
        for cam in CAMERAS:
            phase = rng.uniform(0, 2 * np.pi, 3)
            rgb = np.stack([np.sin(6 * x + phase[0]) * np.cos(4 * y + phase[1]),
                            np.cos(5 * y + phase[2]), x * y], axis=-1)
            rgb = (rgb - rgb.min()) / (rgb.max() - rgb.min())
            images[cam] = np.round(255 * rgb).astype(np.uint8)
        out.append({'images': images, 'state': rng.uniform(-1.5, 1.0, JOINTS).astype(np.float32),
                    'prompt': task})
    return out


def _cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _percentiles(seconds) -> dict:
    ms = np.asarray(seconds) * 1e3
    return {'p50_ms': round(float(np.percentile(ms, 50)), 3),
            'p99_ms': round(float(np.percentile(ms, 99)), 3), 'runs': len(ms)}


def lerobot_actions(policy, post, obs: dict, capture: dict, device: str):
    """LeRobot's normalised and robot-unit actions for lamp's token ids and flow noise."""
    import torch
    batch = {f'observation.images.{cam}': torch.from_numpy(img).permute(2, 0, 1)[None]
             .float().to(device) / 255 for cam, img in obs['images'].items()}
    batch['observation.language.tokens'] = torch.from_numpy(
        np.asarray(capture['tokenize.token_ids'])).to(device)
    batch['observation.language.attention_mask'] = torch.from_numpy(
        np.asarray(capture['tokenize.token_mask'])).to(device)
    noise = torch.from_numpy(np.ascontiguousarray(capture['sample_noise.noise'])).to(device)
    with torch.no_grad():
        normalized = policy.predict_action_chunk(batch, noise=noise)
    return (batch, normalized[0].float().cpu().numpy(),
            post(normalized)[0].float().cpu().numpy())


def row(case: int, capture: dict, chunk, theirs_norm, theirs, tolerance=None) -> dict:
    """The differences of one case; with `tolerance` (the spec's parity atol / rtol) also
    whether every action is within it, as parity judges (numpy allclose)."""
    ours_norm = np.asarray(capture['denoise.actions'])[0, :, :JOINTS]
    checks = {}
    if tolerance:
        from lamp_ros.artifact.compare import compare as allclose
        checks = {f'{name}_within_parity': allclose(a, b, tolerance['atol'],
                                                    tolerance['rtol'])['passed']
                  for name, a, b in (('normalized', ours_norm, theirs_norm),
                                     ('actions', chunk, theirs))}
    return {'case': case, 'tokens': int(np.asarray(capture['tokenize.token_mask']).sum()),
            **checks,
            'normalized_max_abs': float(np.abs(ours_norm - theirs_norm).max()),
            'normalized_cosine': _cosine(ours_norm, theirs_norm),
            'actions_max_abs': float(np.abs(chunk - theirs).max()),
            'actions_cosine': _cosine(chunk, theirs),
            'actions_scale': float(np.abs(theirs).max())}


def load_lerobot(args):
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy
    from lerobot.processor import PolicyProcessorPipeline
    from lerobot.processor.converters import (policy_action_to_transition,
                                              transition_to_policy_action)
    if args.smoke:
        fixtures().shrink_lerobot()
    policy = PI05Policy.from_pretrained(args.checkpoint, local_files_only=True)
    post = PolicyProcessorPipeline.from_pretrained(
        args.checkpoint, config_filename='policy_postprocessor.json',
        to_transition=policy_action_to_transition, to_output=transition_to_policy_action)
    return policy.to(args.device).eval(), post


def eager(args) -> None:
    """lamp's eager policy, built from the spec `lamp import` wrote, against LeRobot: the
    import itself at full size, before any compilation."""
    import torch
    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline
    start = time.perf_counter()
    pipeline = build_pipeline(load_spec(args.spec), device=args.device)
    loaded = time.perf_counter() - start
    policy, post = load_lerobot(args)
    ours = pipeline.policy
    ours.reset()
    rows = []
    for i, obs in enumerate(observations()):
        capture = {}
        with torch.no_grad():
            pixels, image_mask, ids, mask = ours.model_inputs(obs)
            noise = ours.sample_noise()
            cache = ours.prefix(ours.vision(pixels), image_mask, ids, mask)
            actions = ours.denoise(*cache, noise)
            chunk = ours.unnormalize_actions(actions)
        capture = {'tokenize.token_ids': ids, 'tokenize.token_mask': mask,
                   'sample_noise.noise': noise, 'denoise.actions': as_host(actions)}
        _, theirs_norm, theirs = lerobot_actions(policy, post, obs, capture, args.device)
        rows.append(row(i, capture, chunk, theirs_norm, theirs))
        print(json.dumps(rows[-1]), flush=True)
    result = {'device': _device_name(args.device), 'lamp_eager_load_s': round(loaded, 1),
              'cases': rows, 'worst': _worst(rows), 'provenance': _provenance(args.device)}
    print(json.dumps(result['worst']), flush=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(result, f, indent=1)


def as_host(value):
    return value.float().cpu().numpy() if hasattr(value, 'cpu') else np.asarray(value)


def _device_name(device: str) -> str:
    import torch
    return torch.cuda.get_device_name(0) if device.startswith('cuda') else 'cpu'


def _provenance(device: str) -> dict:
    from lamp_ros.provenance import provenance
    return provenance('cuda' if device.startswith('cuda') else 'cpu')


def _worst(rows) -> dict:
    return {k: (max if 'max_abs' in k else min)(r[k] for r in rows)
            for k in ('normalized_max_abs', 'normalized_cosine', 'actions_max_abs',
                      'actions_cosine')}


def compare(args) -> None:
    """The compiled artifact against LeRobot: actions, then latency."""
    import torch
    from lamp_ros.runtime import Runtime

    runtime = Runtime.load(args.artifact)
    with open(os.path.join(args.artifact, 'spec.json'), encoding='utf-8') as f:
        tolerance = json.load(f)['parity']
    policy, post = load_lerobot(args)
    runtime.reset()
    rows, batches = [], []
    for i, obs in enumerate(observations()):
        capture = {}
        chunk = runtime.infer(obs, capture=capture)
        batch, theirs_norm, theirs = lerobot_actions(policy, post, obs, capture, args.device)
        batches.append(batch)
        rows.append(row(i, capture, chunk, theirs_norm, theirs, tolerance))
        print(json.dumps(rows[-1]), flush=True)
    obs = observations()[0]
    lamp_s = []
    for _ in range(args.runs):
        start = time.perf_counter()
        runtime.infer(obs)
        lamp_s.append(time.perf_counter() - start)
    lerobot_s = []
    sync = torch.cuda.synchronize if args.device.startswith('cuda') else (lambda: None)
    with torch.no_grad():
        for _ in range(max(3, args.runs // 4)):
            policy.reset()  # an empty action queue: select_action computes a chunk
            sync()
            start = time.perf_counter()
            policy.select_action(batches[0])
            sync()
            lerobot_s.append(time.perf_counter() - start)
    result = {'device': _device_name(args.device), 'cases': rows, 'worst': _worst(rows),
              'parity_tolerance': {k: tolerance[k] for k in ('atol', 'rtol')},
              'within_parity': all(r['actions_within_parity'] and r['normalized_within_parity']
                                   for r in rows),
              'lamp_infer': _percentiles(lamp_s[2:]),
              'lerobot_select_action': _percentiles(lerobot_s[1:]),
              'artifact_id': runtime.id}
    result['speedup_p50'] = round(result['lerobot_select_action']['p50_ms']
                                  / result['lamp_infer']['p50_ms'], 2)
    result['provenance'] = _provenance(args.device)
    print(json.dumps({k: v for k, v in result.items() if k != 'cases'}, indent=1), flush=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(result, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='step', required=True)
    parser.add_argument('--device', default='cuda', help='where LeRobot runs')
    parser.add_argument('--smoke', action='store_true',
                        help='the fixture\'s tiny widths: the whole path on a CPU')
    p = sub.add_parser('make')
    p.add_argument('--out', required=True)
    p.add_argument('--tokenizer-out', required=True)
    p.add_argument('--tokenizer-dir', required=True,
                   help='a folder with the test tokenizer as a GemmaTokenizer (processors)')
    p.set_defaults(func=make)
    p = sub.add_parser('peak')
    p.add_argument('--record', required=True)
    p.add_argument('--reference', help='checkpoint folder: report peak / its size')
    p.add_argument('command', nargs=argparse.REMAINDER)
    p.set_defaults(func=peak)
    p = sub.add_parser('eager')
    p.add_argument('--checkpoint', required=True)
    p.add_argument('--spec', required=True)
    p.add_argument('--out', required=True)
    p.set_defaults(func=eager)
    p = sub.add_parser('compare')
    p.add_argument('--checkpoint', required=True)
    p.add_argument('--artifact', required=True)
    p.add_argument('--runs', type=int, default=40)
    p.add_argument('--out', required=True)
    p.set_defaults(func=compare)
    args = parser.parse_args()
    args.func(args)


if __name__ == '__main__':
    main()
