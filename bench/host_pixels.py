"""Host cost of handing 3 camera images to a bf16 GPU group: float pixels vs uint8 pixels, and
the host letterbox vs the device letterbox.

    python3 bench/host_pixels.py [--runs 200] [--out bench/results/host_pixels_cpu.json]

Before: each camera resized (uint8), mapped to float32 [-1, 1] on the host, stacked, then cast
to bf16 on the host by the CUDA runner before its copy (what lamp_ros did until the range
mapping moved into the vision encoder). After: resized, stacked as uint8, handed over as is
(the encoder maps the range on the GPU). Both stop where the runner's host-to-device copy
starts, so this runs on the CPU; the two are interleaved so that machine noise hits both alike,
and the ratio is the figure that counts. Camera sizes are the example observation's (a 640x480
base camera and two 224x224 wrist cameras).

Second comparison (`to_buffers`), up to the filled input buffers the CUDA graph copies from
(the cuda backend's HostInputs, unpinned here): the uint8 path with its letterbox on the host
(linear_exact, the same bytes as the device's), against the device letterbox
(compiler/device_letterbox.py), where the host works out cached tables and copies each frame as
it came. Eight distinct observations in turn, so that frames are not all hot in the cache.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

from lamp_ros.backends.cuda.run_side import HostInputs
from lamp_ros.compiler.device_letterbox import frame_capacity
from lamp_ros.ops.image import preprocess_image, resize_with_pad, stack_cameras
from lamp_ros.ops.letterbox import letterbox_frames
from lamp_ros.policies.pi05.example import DEFAULT_SIZES as SIZES
from lamp_ros.provenance import provenance

SLOTS = tuple(SIZES)
SIZE = 224  # pi05_full's image size


def float_handover(images: dict) -> torch.Tensor:
    """The former path: host float conversion and stack, bf16 cast on the host."""
    pixels = np.stack([resize_with_pad(images[s], SIZE, SIZE).astype(np.float32)
                       * (2.0 / 255.0) - 1.0 for s in SLOTS])[None]
    return torch.as_tensor(np.ascontiguousarray(pixels)).to(torch.bfloat16)


def uint8_handover(images: dict) -> torch.Tensor:
    """Today's path: uint8 from resize to the copy; no conversion on the host."""
    pixels, _ = stack_cameras({s: preprocess_image(images[s], SIZE) for s in SLOTS}, SLOTS,
                              SIZE)
    return torch.as_tensor(np.ascontiguousarray(pixels))


def to_buffers_paths() -> dict:
    """name -> fn(images): the host's work from camera frames to the graph's input buffers."""
    capacity = {s: frame_capacity(SIZES[s], SIZE) for s in SLOTS}
    pixels_in = HostInputs(torch, ['pixels'], [{'shape': [1, len(SLOTS), SIZE, SIZE, 3],
                                                'dtype': 'uint8'}], pin_memory=False)
    frames_in = HostInputs(torch, [*SLOTS, 'geometry'],
                           [*({'shape': [capacity[s]], 'dtype': 'uint8', 'frame': True}
                              for s in SLOTS),
                            {'shape': [1, len(SLOTS), 2, SIZE, 4], 'dtype': 'int32'}],
                           pin_memory=False)

    def host_letterbox(images):
        pixels, _ = stack_cameras({s: preprocess_image(images[s], SIZE, 'linear_exact')
                                   for s in SLOTS}, SLOTS, SIZE)
        pixels_in.fill({'pixels': pixels})
        return pixels_in.buffers

    def device_letterbox(images):
        *frames, geometry, _ = letterbox_frames(images, SLOTS, SIZE, capacity)
        frames_in.fill({**dict(zip(SLOTS, frames)), 'geometry': geometry})
        return frames_in.buffers

    return {'host_letterbox': host_letterbox, 'device_letterbox': device_letterbox}


def interleaved(paths: dict, inputs: list, runs: int) -> dict:
    """ms per call of each path, the paths taking turns on the same inputs (10 warm-up)."""
    times = {name: [] for name in paths}
    for i in range(runs + 10):
        for name, fn in paths.items():
            start = time.perf_counter()
            fn(inputs[i % len(inputs)])
            elapsed = (time.perf_counter() - start) * 1e3
            if i >= 10:
                times[name].append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=200)
    parser.add_argument('--out', default='bench/results/host_pixels_cpu.json')
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    images = {s: rng.integers(0, 256, (*SIZES[s], 3), dtype=np.uint8) for s in SLOTS}
    paths = {'float_bf16': float_handover, 'uint8': uint8_handover}
    times = interleaved(paths, [images], args.runs)
    median = {name: statistics.median(t) for name, t in times.items()}
    buffers = to_buffers_paths()
    observations = [{s: rng.integers(0, 256, (*SIZES[s], 3), dtype=np.uint8) for s in SLOTS}
                    for _ in range(8)]
    buffer_times = interleaved(buffers, observations, args.runs)
    buffer_median = {name: statistics.median(t) for name, t in buffer_times.items()}
    report = {
        'what': 'host ms per inference to hand 3 cameras to a bf16 GPU group, up to the copy',
        'runs': args.runs, 'torch_threads': torch.get_num_threads(),
        'median_ms': median,
        'p90_ms': {n: float(np.percentile(t, 90)) for n, t in times.items()},
        'bytes_copied': {name: fn(images).nbytes for name, fn in paths.items()},
        'ratio_float_over_uint8': median['float_bf16'] / median['uint8'],
        'to_buffers': {
            'what': 'host ms per inference from 3 camera frames to the filled input buffers',
            'median_ms': buffer_median,
            'p90_ms': {n: float(np.percentile(t, 90)) for n, t in buffer_times.items()},
            'bytes_in_buffers': {n: sum(b.nbytes for b in fn(observations[0]))
                                 for n, fn in buffers.items()},
            'ratio_host_over_device_letterbox': (buffer_median['host_letterbox']
                                                 / buffer_median['device_letterbox']),
        },
        'provenance': provenance('cpu'),
    }
    for name in paths:
        print(f'{name:12s} median {median[name]:7.3f} ms  p90 {report["p90_ms"][name]:7.3f} ms  '
              f'{report["bytes_copied"][name] / 1e6:.2f} MB to copy')
    print(f'ratio (float / uint8): {report["ratio_float_over_uint8"]:.2f}x')
    to_buffers = report['to_buffers']
    for name in buffers:
        megabytes = to_buffers['bytes_in_buffers'][name] / 1e6
        print(f'{name:16s} median {buffer_median[name]:7.3f} ms  p90 '
              f'{to_buffers["p90_ms"][name]:7.3f} ms  {megabytes:.2f} MB in the input buffers')
    print(f'ratio (host letterbox / device letterbox): '
          f'{to_buffers["ratio_host_over_device_letterbox"]:.2f}x')
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
