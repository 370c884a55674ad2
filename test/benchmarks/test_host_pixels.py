"""bench/host_pixels.py: the pixel hand-overs it times carry the same picture (the host and the
device letterbox's buffers too, through `lamp::letterbox`'s CPU implementation), and the script
runs and writes its report."""

import json
import os
import subprocess
import sys

import numpy as np
import torch

from bench import host_pixels
from lamp_ros.kernels import operators as kernel_ops
from lamp_ros.policies.pi05.siglip import to_model_range

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'bench', 'host_pixels.py')


def test_both_hand_overs_reach_the_model_as_the_same_pixels():
    bench = host_pixels
    rng = np.random.default_rng(3)
    images = {s: rng.integers(0, 256, (*bench.SIZES[s], 3), dtype=np.uint8) for s in bench.SLOTS}
    before = bench.float_handover(images)
    now = bench.uint8_handover(images)
    assert now.dtype == torch.uint8 and before.dtype == torch.bfloat16
    assert now.shape == before.shape == (1, 3, 224, 224, 3)
    # the encoder's mapping of today's uint8, rounded as the bf16 group rounds it
    torch.testing.assert_close(to_model_range(now).to(torch.bfloat16), before, rtol=0, atol=0)


def test_host_and_device_letterbox_buffers_make_the_same_pixels():
    bench = host_pixels
    rng = np.random.default_rng(4)
    images = {s: rng.integers(0, 256, (*bench.SIZES[s], 3), dtype=np.uint8) for s in bench.SLOTS}
    paths = bench.to_buffers_paths()
    (pixels,) = paths['host_letterbox'](images)
    *frames, geometry = paths['device_letterbox'](images)
    assert torch.equal(kernel_ops.letterbox(frames, geometry), pixels)


def test_script_reports_both_paths(tmp_path):
    out = tmp_path / 'host_pixels.json'
    env = {**os.environ, 'PYTHONPATH': ROOT}
    subprocess.run([sys.executable, SCRIPT, '--runs', '5', '--out', str(out)], check=True,
                   env=env, cwd=ROOT, capture_output=True, timeout=120)
    report = json.loads(out.read_text())
    assert set(report['median_ms']) == {'float_bf16', 'uint8'}
    assert report['bytes_copied'] == {'float_bf16': 3 * 224 * 224 * 3 * 2,
                                      'uint8': 3 * 224 * 224 * 3}
    assert report['ratio_float_over_uint8'] > 0
    to_buffers = report['to_buffers']
    assert set(to_buffers['median_ms']) == {'host_letterbox', 'device_letterbox'}
    assert to_buffers['bytes_in_buffers'] == {
        'host_letterbox': 3 * 224 * 224 * 3,
        'device_letterbox': (480 * 640 + 2 * 224 * 224) * 3 + 3 * 2 * 224 * 4 * 4}
    assert to_buffers['ratio_host_over_device_letterbox'] > 0
    assert report['provenance']['card'].startswith('CPU')
    assert report['provenance']['command'].endswith(f'--out {out}')
