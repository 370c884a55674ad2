"""Full-size pi0.5-shaped model on one GPU: where lamp_ros's CUDA path stands (run on the H200).

    python3 bench/gpu_pi05.py [--out bench/results/gpu_pi05.json] [--runs 50]

Measures the model stages (vision + prefix + 10-step denoise; 3 cameras at 224, 200 prompt
tokens, horizon 50, bf16, random weights) in one run, side by side:
  eager          the reference policy's modules, eager PyTorch
  eager_graph    the same captured as one CUDA graph ("plain PyTorch + one CUDA graph")
  lamp           what the cuda backend runs for a spec with every graph pass on (fold norms,
                 merge QKV / gate-up, precomputed time conditioning, unread work removed,
                 Euler folded, constants): the group module, torch.export, one CUDA graph
(The cuda backend without passes is eager_graph's computation exported; it is not re-timed.)
Median and p99 by CUDA events, parity (relative L2 error of the actions vs eager bf16), peak
memory, and a stage-wise roofline from counted FLOPs and bytes. Keys the issue asks for that
this script does not measure (HF transformers eager, torch.compile max-autotune) are written as
null with the reason, not guessed.
"""

import argparse
import json
import os
import time

import torch

from lamp_ros.backends.base import GroupSpec
from lamp_ros.backends.group_module import group_module
from lamp_ros.compiler.passes import PASS_NAMES, run_passes
from lamp_ros.graph.graph import Graph, Node
from lamp_ros.graph.types import TensorType
from lamp_ros.policies.config import get_preset
from lamp_ros.policies.param_count import param_counts
from lamp_ros.policies.pi05 import Pi05Model

PEAK_TFLOPS, PEAK_TBPS = 790.0, 4.3   # bf16 dense matrix rate and copy bandwidth (FIELD-NOTES)


def init_on_gpu(model, seed=0):
    gen = torch.Generator(device='cuda').manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.ndim >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen, device='cuda') / fan_in ** 0.5)
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen, device='cuda'))


def inputs(cfg):
    g = torch.Generator(device='cuda').manual_seed(1)
    s = cfg.vision.image_size
    pixels = torch.rand((1, 3, s, s, 3), generator=g, device='cuda') * 2 - 1
    mask = torch.ones((1, 3), dtype=torch.bool, device='cuda')
    ids = torch.randint(0, 1000, (1, cfg.max_token_len), generator=g, device='cuda')
    tmask = torch.zeros((1, cfg.max_token_len), dtype=torch.bool, device='cuda')
    tmask[:, :60] = True
    noise = torch.randn((1, cfg.action_horizon, cfg.action_dim), generator=g, device='cuda')
    return pixels.bfloat16(), mask, ids, tmask, noise


def group_graph():
    """The three model stages as the compiler's graph shows them (types are not used here)."""
    t = TensorType('float32', (1,))
    names = ['pixels', 'image_mask', 'token_ids', 'token_mask', 'noise', 'vision.image_tokens',
             'prefix.k_cache', 'prefix.v_cache', 'prefix.prefix_mask', 'denoise.actions']
    values = {n: t for n in names}
    nodes = (Node('vision', 'vision', 'model', ('pixels',), ('vision.image_tokens',)),
             Node('prefix', 'prefix', 'model', ('vision.image_tokens', 'image_mask',
                                                'token_ids', 'token_mask'),
                  ('prefix.k_cache', 'prefix.v_cache', 'prefix.prefix_mask')),
             Node('denoise', 'denoise', 'model', ('prefix.k_cache', 'prefix.v_cache',
                                                  'prefix.prefix_mask', 'noise'),
                  ('denoise.actions',)))
    graph = Graph(nodes, values, tuple(names[:5]), ('denoise.actions',))
    group = GroupSpec('g_model', 'cuda', 'bf16', 'cuda:0', ('vision', 'prefix', 'denoise'),
                      tuple(names[:5]), ('denoise.actions',))
    return graph, group


def cuda_graph(fn, args):
    static = [a.clone() for a in args]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            fn(*static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = fn(*static)

    def run(*new):
        for s, n in zip(static, new):
            s.copy_(n)
        graph.replay()
        return out
    return run


def time_it(fn, args, runs):
    with torch.no_grad():
        for _ in range(5):
            fn(*args)
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            out = fn(*args)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
    times = torch.tensor(times)
    return float(times.median()), float(torch.quantile(times, 0.99)), out


def roofline(cfg):
    """Stage-wise max(compute, memory) from counted FLOPs and weight bytes (bf16)."""
    c = param_counts(cfg)
    img, text, h = cfg.image_tokens, cfg.max_token_len, cfg.action_horizon
    prefix_tokens = img + text
    e, lw = cfg.expert, cfg.llm
    stages = {
        'vision': (2 * c['vision'] * img + 4 * cfg.vision.depth * img * (img // 3) *
                   cfg.vision.width, 2 * c['vision']),
        'prefix': (2 * c['llm'] * prefix_tokens + 4 * lw.depth * prefix_tokens ** 2 *
                   lw.num_heads * lw.head_dim, 2 * c['llm'] + 2 * c['embedding'] * 0),
        'denoise': (cfg.num_steps * (2 * (c['expert'] + c['expert_io']) * h + 4 * e.depth * h *
                                     (prefix_tokens + h) * e.num_heads * e.head_dim),
                    cfg.num_steps * 2 * (c['expert'] + c['expert_io'] + c['expert_adarms'])),
    }
    out = {}
    for name, (flops, nbytes) in stages.items():
        out[name] = {'tflop': flops / 1e12, 'gbytes': nbytes / 1e9,
                     'ms': max(flops / (PEAK_TFLOPS * 1e12), nbytes / (PEAK_TBPS * 1e12)) * 1e3}
    out['total_ms'] = sum(v['ms'] for v in out.values())
    return out


def rel_error(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--out', default='bench/results/gpu_pi05.json')
    parser.add_argument('--runs', type=int, default=50)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = get_preset('pi05_full')
    t0 = time.perf_counter()
    with torch.device('cuda'):
        model = Pi05Model(cfg).to(torch.bfloat16).eval()
    init_on_gpu(model)
    print(f'built pi05_full on the GPU in {time.perf_counter() - t0:.1f} s', flush=True)
    x = inputs(cfg)

    def eager(pix, mask, ids, tmask, noise):
        return model.sample_actions(pix, mask, ids, tmask, noise)

    results, outs = {}, {}
    results['eager'] = time_it(eager, x, args.runs)
    results['eager_graph'] = time_it(cuda_graph(eager, x), x, args.runs)
    graph, group = group_graph()
    for name, enabled in (('lamp_passes', {p: True for p in PASS_NAMES}),):
        start = time.perf_counter()
        modules = {'vision': model.vision, 'prefix': model.prefix, 'denoise': model.expert}
        modules, _ = run_passes(modules, enabled)
        module = group_module(graph, group, modules)
        with torch.no_grad():
            program = torch.export.export(module, x, strict=False)
        runner = program.module()
        build_s = time.perf_counter() - start
        fn = cuda_graph(lambda *a, r=runner: r(*a)[0], x)
        results[name] = time_it(fn, x, args.runs)
        print(f'{name}: export {build_s:.1f} s', flush=True)
        results[name + '_build_s'] = build_s
    for key in ('eager', 'eager_graph', 'lamp_passes'):
        outs[key] = results[key][2]
    roof = roofline(cfg)
    ref = outs['eager']
    report = {
        'device': torch.cuda.get_device_name(), 'torch': torch.__version__,
        'shapes': {'cameras': 3, 'image': cfg.vision.image_size,
                   'prompt_tokens': cfg.max_token_len, 'horizon': cfg.action_horizon,
                   'steps': cfg.num_steps, 'dtype': 'bf16'},
        'eager_ms': results['eager'][0], 'eager_p99_ms': results['eager'][1],
        'eager_cuda_graph_ms': results['eager_graph'][0],
        'lamp_ms': results['lamp_passes'][0], 'lamp_p99_ms': results['lamp_passes'][1],
        'lamp_export_s': results['lamp_passes_build_s'],
        'roofline_ms': roof['total_ms'], 'roofline': roof,
        'pct_of_roofline': 100 * roof['total_ms'] / results['lamp_passes'][0],
        'parity_max_rel_error': rel_error(outs['lamp_passes'], ref),
        'parity_rel_error_eager_graph': rel_error(outs['eager_graph'], ref),
        'peak_memory_gb': torch.cuda.max_memory_allocated() / 1e9,
        'hf_eager_ms': None, 'torch_compile_ms': None,
        'not_measured': {'hf_eager_ms': 'HF transformers baseline not written yet',
                         'torch_compile_ms': 'max-autotune takes ~450 s; not run in this call'},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)
    for key in ('eager_ms', 'eager_cuda_graph_ms', 'lamp_ms', 'lamp_export_s', 'roofline_ms',
                'pct_of_roofline', 'parity_max_rel_error', 'parity_rel_error_eager_graph',
                'peak_memory_gb'):
        print(f'{key:28s} {report[key]:.4g}')


if __name__ == '__main__':
    main()
