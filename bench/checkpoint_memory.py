#!/usr/bin/env python3
"""Host memory of importing a full-size pi0.5 checkpoint: `lamp import` and the eager load.

The checkpoint has the layout of LeRobot's stock pi05 in bf16 mode: the 813 tensors, shapes
and dtypes LeRobot 0.6.1 builds (test/data/checkpoints/lerobot_pi05_full_keys.json), 8.3 GB
on disk. Its values are random (LeRobot itself is not needed to measure memory; that lamp
reads LeRobot's files right is what test/checkpoints checks against LeRobot's own output). The
safetensors file is written one tensor at a time, so making it needs little memory either.

Measured, each in its own process (peak resident set, `ru_maxrss`): `lamp import` (headers,
sha256 of every file, the report and the spec), and building the eager policy from that spec
on the CPU in bf16 (every tensor read from the memory-mapped file, checked and copied into a
model built on the meta device). Prints each peak against the checkpoint's size on disk.

    .venv/bin/python bench/checkpoint_memory.py --work /tmp/ckpt_memory \
        --out bench/results/checkpoint_memory.json

Every step runs in a child of a small parent: Linux carries a parent's resident high-water mark
into a forked child, so a parent that had written the checkpoint would inflate every figure.
"""

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lamp_ros.provenance import provenance  # noqa: E402

DATA = os.path.join(ROOT, 'test', 'data', 'checkpoints')
JOINTS = 14
DTYPES = {'float32': ('F32', np.float32), 'bfloat16': ('BF16', None)}


def write_safetensors(path: str, table: dict, seed: int = 0) -> int:
    """Random values in the table's layout, written tensor by tensor (LeRobot-like scales)."""
    import torch
    names = sorted(table)
    header, offset = {}, 0
    for name in names:
        shape, dtype = table[name]['shape'], table[name]['dtype']
        size = math.prod(shape) * (4 if dtype == 'float32' else 2)
        header[name] = {'dtype': DTYPES[dtype][0], 'shape': shape,
                        'data_offsets': [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(',', ':')).encode()
    blob += b' ' * (-len(blob) % 8)
    gen = torch.Generator().manual_seed(seed)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(blob)))
        f.write(blob)
        for name in names:
            shape, dtype = table[name]['shape'], table[name]['dtype']
            scale = 1 / math.sqrt(math.prod(shape[1:])) if len(shape) > 1 else 0.05
            values = torch.randn(shape, generator=gen) * scale
            values = values.to(torch.bfloat16 if dtype == 'bfloat16' else torch.float32)
            f.write(values.contiguous().view(torch.uint8).numpy().tobytes())
    return offset


def make_checkpoint(folder: str) -> None:
    """The full-size layout plus the tiny fixture's config and processors, resized."""
    sys.path.insert(0, os.path.join(ROOT, 'bench'))
    from lerobot_pi05_full import padded_tokenizer
    from safetensors.numpy import save_file
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(DATA, 'lerobot_pi05_full_keys.json'), encoding='utf-8') as f:
        table = json.load(f)['tensors']
    start = time.perf_counter()
    size = write_safetensors(os.path.join(folder, 'model.safetensors'), table)
    print(f'model.safetensors: {len(table)} tensors, {size / 1e9:.2f} GB in '
          f'{time.perf_counter() - start:.0f} s', flush=True)
    tiny = os.path.join(DATA, 'lerobot_pi05_tiny')
    for name in os.listdir(tiny):
        if name.endswith('.json'):
            shutil.copy(os.path.join(tiny, name), folder)
    with open(os.path.join(folder, 'config.json'), encoding='utf-8') as f:
        config = json.load(f)
    config['input_features']['observation.state']['shape'] = [JOINTS]
    config['output_features']['action']['shape'] = [JOINTS]
    config.update(chunk_size=50, n_action_steps=50, tokenizer_max_length=200, dtype='bfloat16')
    with open(os.path.join(folder, 'config.json'), 'w', encoding='utf-8') as f:
        json.dump(config, f, indent=1)
    for name in ('policy_preprocessor.json', 'policy_postprocessor.json'):
        path = os.path.join(folder, name)
        with open(path, encoding='utf-8') as f:
            text = f.read().replace('"max_length": 48', '"max_length": 200')
        with open(path, 'w', encoding='utf-8') as f:
            f.write(text.replace('[\n              6\n            ]', f'[{JOINTS}]'))
    rng = np.random.default_rng(1)
    q01 = rng.uniform(-2, -0.5, JOINTS).astype(np.float32)
    q99 = (q01 + rng.uniform(0.5, 3, JOINTS)).astype(np.float32)
    for name, feature in (('policy_preprocessor_step_3_normalizer_processor.safetensors',
                           'observation.state'),
                          ('policy_postprocessor_step_0_unnormalizer_processor.safetensors',
                           'action')):
        save_file({f'{feature}.q01': q01, f'{feature}.q99': q99}, os.path.join(folder, name))
    padded_tokenizer(os.path.join(os.path.dirname(folder), 'tokenizer.model'))


def copy_tiny_checkpoint(folder: str) -> None:
    """--smoke: LeRobot's tiny pi05 as LeRobot saved it (the test fixture) and its tokenizer."""
    shutil.copytree(os.path.join(DATA, 'lerobot_pi05_tiny'), folder, dirs_exist_ok=True)
    shutil.copy(os.path.join(DATA, 'tokenizer.model'),
                os.path.join(os.path.dirname(folder), 'tokenizer.model'))


def measured(command: list) -> dict:
    """Run `command` in a child process: wall seconds and that process's peak resident set."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f'{command[:4]} failed: {output[-2000:]}')
    print(output[-1500:], flush=True)
    return {'seconds': round(seconds, 1), 'peak_rss_bytes': usage.ru_maxrss * 1024}


LOAD = """
import resource, sys, time
from lamp_ros.spec import load_spec
from lamp_ros.trace.from_spec import build_pipeline
start = time.perf_counter()
pipeline = build_pipeline(load_spec(sys.argv[1]))
p = sum(x.numel() for x in pipeline.policy.model.parameters())
dtype = pipeline.policy.model.vision.patch_embed.weight.dtype
print(f'eager policy: {p / 1e9:.3f} G parameters, {dtype}, {time.perf_counter() - start:.0f} s')
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--work', required=True, help='folder for the 8.3 GB checkpoint')
    parser.add_argument('--out', required=True, help='JSON of the measurements')
    parser.add_argument('--keep', action='store_true', help='keep the checkpoint afterwards')
    parser.add_argument('--make-only', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--smoke', action='store_true',
                        help='the same steps on LeRobot\'s tiny pi05 (a test fixture) in '
                             'seconds: checks the script, says nothing of full-size memory')
    args = parser.parse_args()
    folder = os.path.join(args.work, 'pi05_full_lerobot_layout')
    if args.make_only:
        make_checkpoint(folder)
        return
    if args.smoke:
        folder = os.path.join(args.work, 'pi05_tiny_lerobot')
        copy_tiny_checkpoint(folder)
    elif not os.path.isfile(os.path.join(folder, 'model.safetensors')):
        subprocess.run([sys.executable, __file__, '--work', args.work, '--out', args.out,
                        '--make-only'], check=True)
    disk = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    spec = os.path.join(args.work, 'pi05_full_import.yaml')
    python = sys.executable
    results = {'checkpoint': 'LeRobot tiny pi05 (smoke)' if args.smoke else
               'LeRobot pi05 full-size layout, random values', 'checkpoint_bytes': disk}
    results['import'] = measured([python, '-m', 'lamp_ros.cli', 'import', folder, '--tokenizer',
                                  os.path.join(args.work, 'tokenizer.model'), '--target', 'cuda',
                                  '--out', spec])
    results['eager_load_bf16'] = measured([python, '-c', LOAD, spec])
    for key in ('import', 'eager_load_bf16'):
        results[key]['peak_over_checkpoint'] = round(
            results[key]['peak_rss_bytes'] / disk, 3)
    results['provenance'] = provenance('cpu')
    print(json.dumps(results, indent=1))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(results, f, indent=1)
    if not args.keep:
        shutil.rmtree(args.work)


if __name__ == '__main__':
    main()
