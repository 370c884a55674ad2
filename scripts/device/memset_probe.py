"""Which library calls put a memset into the artifact's CUDA graph, and what does it cost?

The kernel trace of pi05_full (`lamp profile`, bench/results/h200_lamp_profile/) has 44 memsets
a replay on the graph's main stream: one before each of the vision's 27 cuDNN attentions and
one before each of the prefix's 17 FP8 gate/up GEMMs (torch._scaled_mm, cuBLASLt's fast FP8
mode). A memset lasts 0.8 us, but the gaps around it do not: ~1 us before it and ~4 us after it,
where two kernels follow each other ~0.5 us apart, so each costs ~5 us of the critical path
(0.2 ms an inference). This finds which call makes them and whether another form of the same
call avoids them: each form captured in one CUDA graph over the policy's layer count (distinct
weights), its memsets counted in one replay under the profiler (CUPTI), its time per layer the
median of replays, its output checked against the artifact's form.

  vision_attention  the encoder's qkv GEMM then scaled_dot_product_attention (3 cameras x 16
                    heads x 256 patches, head dim 72, q/k/v strided views of the projection),
                    27 layers, on the cuDNN, flash and memory-efficient backends
  fp8_gate_up       torch._scaled_mm with row-wise scales at the prefix's gate/up (832 rows x
                    2048 -> 32768), 17 layers, with fast accumulation (the artifact) and
                    without, and the down GEMM's shape (16384 -> 2048) beside them

    python3 scripts/device/memset_probe.py [--out FILE.json] [--only SECTION,...]
"""

import os
import sys

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.getcwd())
from bench.probes import graph_replay_ms, run_sections  # noqa: E402
from lamp_ros.kernels import tuning  # noqa: E402

DEV, BF, FP8 = 'cuda', torch.bfloat16, torch.float8_e4m3fn


def measured(fn, want=None) -> dict:
    """fn's graph: memsets and kernels in one replay, median ms a replay, error against want."""
    times, got = graph_replay_ms(fn, runs=50)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    times.sort()
    row = {'ms': round(times[len(times) // 2], 4),
           'memsets': sum(n.startswith('Memset') for n in names), 'events': len(names)}
    if want is not None:
        row['rel_err'] = tuning.disagreement(got[0] if isinstance(got, list) else got, want)
    print(row, flush=True)
    return row


def vision_attention() -> dict:
    layers, b, n, heads, d, width = 27, 3, 256, 16, 72, 1152
    g = torch.Generator(device=DEV).manual_seed(0)
    x = torch.randn(b, n, width, device=DEV, generator=g).to(BF)
    weights = [(torch.randn(3 * heads * d, width, device=DEV, generator=g) * width ** -0.5)
               .to(BF) for _ in range(layers)]
    bias = torch.zeros(3 * heads * d, device=DEV, dtype=BF)

    def layer(w):
        qkv = F.linear(x, w, bias).view(b, n, 3, heads, d)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        return F.scaled_dot_product_attention(q, k, v)

    out = {}
    want = None
    for name, backend in (('cudnn', SDPBackend.CUDNN_ATTENTION),
                          ('flash', SDPBackend.FLASH_ATTENTION),
                          ('efficient', SDPBackend.EFFICIENT_ATTENTION)):
        def run(backend=backend):
            with sdpa_kernel(backend):
                return [layer(w) for w in weights]
        if want is None:
            want = run()[0]
        print(name, end=' ', flush=True)
        row = measured(run, want)
        row['us_per_layer'] = round(row['ms'] * 1e3 / layers, 2)
        out[name] = row
    return out


def fp8_gate_up() -> dict:
    layers, rows = 17, 832
    g = torch.Generator(device=DEV).manual_seed(0)
    out = {}
    for shape, (k, m) in (('gate_up', (2048, 32768)), ('down', (16384, 2048))):
        a = torch.randn(rows, k, device=DEV, generator=g).to(FP8)
        a_scale = torch.ones(rows, 1, device=DEV)
        ws = [torch.randn(m, k, device=DEV, generator=g).to(FP8) for _ in range(layers)]
        w_scale = torch.full((1, m), 2.0 ** -6, device=DEV)
        want = None
        for fast in (True, False):
            def run(fast=fast):
                return [torch._scaled_mm(a, w.t(), a_scale, w_scale, out_dtype=BF,
                                         use_fast_accum=fast) for w in ws]
            if want is None:
                want = run()[0]
            print(shape, 'fast' if fast else 'float32 sums', end=' ', flush=True)
            row = measured(run, want)
            row['us_per_layer'] = round(row['ms'] * 1e3 / layers, 2)
            out[f'{shape} fast_accum={fast}'] = row
    return out


def main():
    run_sections(__doc__.splitlines()[0], 'memset_probe.json',
                 (('vision_attention', vision_attention), ('fp8_gate_up', fp8_gate_up)))


if __name__ == '__main__':
    main()
