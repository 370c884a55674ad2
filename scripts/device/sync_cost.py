"""What does a step of the expert's chain cost when it is a kernel boundary, and what would it
cost as a grid-wide barrier inside one persistent kernel? The question a persistent expert
kernel (bench/results/README.md, the persistent expert) stands or falls by, answered before
writing one.

  boundary   a CUDA graph of N dependent launches of a kernel of one program per SM, each
             reading and writing the expert's 50 x 1024 bf16 activations: GPU time per launch
  barrier    one launch of the same programs passing N grid barriers (an atomic arrival
             counter, then spinning on it: an atomic read, or a volatile load), per barrier,
             the activations read and written between barriers as between the launches

Both are (time at N = 201 - time at N = 1) / 200, GPU time of CUDA-graph replays (the counter
is zeroed inside the graph). Every program of the barrier kernel must be resident at once:
one small program per SM is. Run on the GPU machine: python3 scripts/device/sync_cost.py

Measured on the H200 (2026-12-01, bench/results/sync_cost_h200.json, 132 programs): a kernel
boundary 1.18 us a step, a grid barrier 1.08 us (atomic spin) or 1.34 us (volatile spin). A
persistent kernel would save about 0.1 us per step of the chain, not the microseconds the
expert's kernels spend each: those go to the dependent loads and reductions inside them.
"""

import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from lamp_ros.kernels import tuning  # noqa: E402

ROWS, WIDTH = 50, 1024


@triton.jit
def _touch(x_ptr, y_ptr, program, programs, n, BLOCK: tl.constexpr):
    """This program's share of the activations: read x, write y (one round trip each)."""
    for start in range(program * BLOCK, n, programs * BLOCK):
        at = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + at, mask=at < n, other=0.0, cache_modifier='.cg')
        tl.store(y_ptr + at, v + 1.0, mask=at < n)


@triton.jit
def _step_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    _touch(x_ptr, y_ptr, tl.program_id(0), tl.num_programs(0), n, BLOCK)


@triton.jit
def _barrier_kernel(x_ptr, y_ptr, counter_ptr, n, barriers, BLOCK: tl.constexpr,
                    VOLATILE: tl.constexpr):
    program, programs = tl.program_id(0), tl.num_programs(0)
    for i in range(barriers):
        _touch(x_ptr, y_ptr, program, programs, n, BLOCK)
        tl.debug_barrier()  # every thread's stores issued before the program arrives
        tl.atomic_add(counter_ptr, 1, sem='release')
        target = (i + 1) * programs
        if VOLATILE:
            seen = tl.load(counter_ptr, volatile=True)
            while seen < target:
                seen = tl.load(counter_ptr, volatile=True)
            tl.atomic_add(counter_ptr, 0, sem='acquire')  # order the reads that follow
        else:
            seen = tl.atomic_add(counter_ptr, 0, sem='acquire')
            while seen < target:
                seen = tl.atomic_add(counter_ptr, 0, sem='acquire')
        tl.debug_barrier()


def main():
    dev = 'cuda'
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    x = torch.randn(ROWS * WIDTH, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    counter = torch.zeros(1, dtype=torch.int32, device=dev)
    block = 512
    n = x.numel()

    def boundary(count):
        def run():
            for _ in range(count):
                _step_kernel[(sms,)](x, y, n, BLOCK=block, num_warps=4)
        return run

    def barrier(count, volatile):
        def run():
            counter.zero_()
            _barrier_kernel[(sms,)](x, y, counter, n, count, BLOCK=block, VOLATILE=volatile,
                                    num_warps=4)
        return run

    report = {'gpu': torch.cuda.get_device_name(), 'programs': sms,
              'activations': f'{ROWS}x{WIDTH} bf16'}
    forms = {'boundary': boundary, 'barrier_atomic_spin': lambda c: barrier(c, 0),
             'barrier_volatile_spin': lambda c: barrier(c, 1)}
    for name, make in forms.items():
        one = tuning.gpu_time_ms(make(1))
        many = tuning.gpu_time_ms(make(201))
        report[name] = {'us_per_step': round((many - one) / 200 * 1e3, 3),
                        'us_at_1': round(one * 1e3, 2), 'us_at_201': round(many * 1e3, 2)}
        print(name, report[name], flush=True)
        if name != 'boundary':
            assert int(counter.item()) == 201 * sms, counter.item()
    out = os.path.join(os.environ.get('OUT', '.'), 'sync_cost.json')
    with open(out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
