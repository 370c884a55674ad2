"""Full-size pi0.5-shaped policy on one GPU: lamp_ros's artifact against what PyTorch users get.

    python3 bench/gpu_pi05.py --artifact ART [--out bench/results/gpu_pi05.json] [--runs 30]
                              [--torch-compile [--compile-cache CACHE]] [--kernels-out FILE]
                              [--trace-out TRACE.json.gz]
    python3 bench/gpu_pi05.py --compile-only --compile-cache CACHE

ART is `lamp compile config/specs/pi05_full.yaml` built on this GPU. One run measures the model
stages (vision + prefix + 10-step denoise; 3 cameras at 224, 200 prompt tokens, horizon 50, bf16)
side by side on the same inputs (the artifact's own group inputs for the example observation;
with the cameras letterboxed on the device, the baselines take the pixels the device makes, as
the host computes them: `baseline_inputs`):
  hf_eager       the same shapes from Hugging Face transformers modules (SigLIP, Gemma), eager
                 (bench/baselines.py; its own random weights: a timing baseline only)
  eager          the reference policy's modules with the artifact's weights, eager PyTorch
  eager_graph    the same captured as one CUDA graph ("plain PyTorch + one CUDA graph")
  torch_compile  torch.compile max-autotune + CUDA graph of the reference (--torch-compile;
                 --compile-scope whole: sample_actions as one program, inductor's CUDA graphs;
                 stages: vision, prefix and the velocity field compiled on their own, the
                 velocity once for all steps, in one CUDA graph of ours; baselines.py);
                 optional: its cold compile outlasts a 10-minute device call with the rest, so
                 --compile-only compiles it alone on inputs of the same shapes and dtypes and
                 saves inductor's portable cache to CACHE; a later run given the same CACHE
                 compiles from it in the same run as the other paths; baselines.torch_compile)
  lamp           the artifact through `Runtime` (sync): the cuda group's CUDA-event time per
                 inference (`gpu:` in the runtime profile) with its groups run in plan order,
                 plus the whole inference wall time with the host stages (tokenizer, image
                 resize, normalisation) and copies, as a tick runs it (`lamp_inference`: the
                 vision's graph launched before the tokenizer and the noise) and in plan order
                 (`lamp_inference_serial`); `lamp_gpu_overlapped` is the CUDA-event time of the
                 former, which also holds any host time the vision does not cover. An
                 artifact captured for shorter prompts (spec fusion.text_lengths) runs the
                 bench's prompt (52 valid tokens of 200) at the shortest length that holds it
                 (`lamp_text_length`); `lamp_full_prompt` is its GPU time with a prompt that
                 needs all 200, the length every baseline computes
Median and p99 ms, ratios, % of a stage-wise roofline from counted FLOPs and weight bytes, peak
GPU memory of the artifact, and parity: relative L2 error of the artifact's actions against the
eager bf16 reference on the same inputs. Keys the script cannot measure are null with a reason.
Pictures (bench/gpu_pi05_plots.py): the paths as a chart beside the report (OUT with .png), and
with --trace-out one whole inference as a tick runs it, profiled with its CUDA graphs' kernels:
the Chrome trace (gzipped; Perfetto opens it) and its kernel timeline (TRACE with .png).

--smoke (the CPU smoke of scripts/device/lib.sh) runs the same paths on the CPU on an artifact
of the smoke spec (scripts/device/smoke/pi05.yaml: pi05_tiny, onnxruntime, float32), a few
runs each, so that a Python error shows before a device call: the eager reference in float32
(the artifact's precision), HF eager at the tiny config (where transformers is installed),
parity, the report and its chart, with wall-clock times (`lamp` is the compiled group's wall
time; the report's `smoke` says so). What needs CUDA is null with the reason: the CUDA graph
path, peak GPU memory, the kernel table and trace; --torch-compile and --compile-only compile
through dynamo and AOTAutograd only (backend aot_eager), not inductor (its max-autotune kernels
are the GPU's, and a cold CPU compile of the tiny policy takes minutes). Not figures of record.
"""

import argparse
import json
import os
import time

import numpy as np
import torch

from lamp_ros.policies.pi05.config import get_preset
from lamp_ros.policies.pi05.param_count import param_counts
from lamp_ros.policies.pi05.model import Pi05Model
from lamp_ros.policies.pi05.weights import init_weights
from lamp_ros.provenance import cpu_name, provenance

PEAK_TFLOPS, PEAK_TBPS = 790.0, 4.3   # bf16 dense matrix rate and copy bandwidth (FIELD-NOTES)
SMOKE_NOTE = ('CPU smoke (--smoke): pi05_tiny on the CPU in float32, a few runs, wall-clock '
              'times (lamp: the onnxruntime group\'s), the H200\'s roofline: not figures of '
              'record')
SMOKE_NOT_MEASURED = {  # what only the GPU measures (the smoke's report says why)
    'eager_graph_ms': 'not run: a CUDA graph needs the GPU (CPU smoke)',
    'lamp_peak_memory_gb': 'not measured: GPU memory (CPU smoke)',
    'process_peak_memory_gb': 'not measured: GPU memory (CPU smoke)',
}


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


def time_it(fn, args, runs, warmup=5):
    """(median ms, p99 ms, last output) of `runs` calls after `warmup`: CUDA-event times on the
    GPU, wall times on the CPU (the smoke)."""
    on_gpu = args[0].is_cuda
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        if on_gpu:
            torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            if not on_gpu:
                start = time.perf_counter()
                out = fn(*args)
                times.append((time.perf_counter() - start) * 1e3)
                continue
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


def load_artifact(path: str, runs: int, device: str = 'cuda', warmup: int = 5):
    """Runtime (sync) of the artifact -> (runtime, cuda group, its inputs as GPU tensors, its
    actions, {'lamp': device ms (median, p99), 'lamp_inference': wall ms}, peak GB). On the
    CPU (the smoke): the onnxruntime group, CPU tensors, its wall ms as 'lamp', no peak."""
    from lamp_ros.runtime import Runtime
    from lamp_ros.runtime.loop import synthetic_observation
    on_gpu = device == 'cuda'
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    runtime = Runtime.load(path, execution='sync', profile_window=runs)
    print(f'artifact loaded in {time.perf_counter() - start:.1f} s', flush=True)
    backend = 'cuda' if on_gpu else 'onnxruntime'
    (group,) = [g for g in runtime.artifact.plan.groups if g.backend == backend]
    feeds = runtime.feeds(synthetic_observation(runtime), 0.0)
    captured = {}
    runtime.reset()
    runtime.run(feeds, capture=captured)
    x = [torch.as_tensor(np.asarray(v)).to(device)
         for v in baseline_inputs(runtime.artifact.graph, group, captured)]
    (out_name,) = group.outputs
    lamp_out = torch.as_tensor(np.asarray(captured[out_name], np.float32)).to(device)
    times, text = {}, {}

    def measure(feeds, overlap, gpu_key, inference_key):
        runtime.overlap = overlap
        for _ in range(warmup):
            runtime.reset()
            runtime.run(feeds)
        runtime.profiler.reset()
        for _ in range(runs):
            runtime.reset()  # every run infers
            runtime.run(feeds)
        profile = runtime.profile()
        gpu, inference = profile['gpu' if on_gpu else 'groups'][group.name], profile['inference']
        times[gpu_key] = (gpu['p50_ms'], gpu['p99_ms'])
        times[inference_key] = (inference['p50_ms'], inference['p99_ms'])

    axis = getattr(runner_of(runtime, group), 'text', None)
    if axis is not None:  # captured for shorter prompts: also a prompt that needs every token
        long_feeds, tokens = full_prompt_feeds(runtime, axis)
        measure(long_feeds, True, 'lamp_full_prompt', 'lamp_full_prompt_inference')
        text = {'lamp_text_lengths': list(axis.lengths), 'lamp_full_prompt_tokens': tokens}
    # the groups in plan order first (the GPU time is the graphs' alone), then as a control
    # tick runs them: the first stage's graph launched before the other host stages
    # (runtime/schedule.py), whose whole inference is what the robot waits for
    measure(feeds, False, 'lamp', 'lamp_inference_serial')
    measure(feeds, True, 'lamp_gpu_overlapped', 'lamp_inference')
    if axis is not None:
        text['lamp_text_length'] = runner_of(runtime, group).last_text_length
        text['lamp_prompt_tokens'] = int(np.asarray(captured[axis.mask]).sum())
    peak = torch.cuda.max_memory_allocated() / 1e9 if on_gpu else None
    return runtime, group, x, lamp_out, times, peak, text


def baseline_inputs(graph, group, captured) -> list:
    """The reference's inputs (pixels, image mask, token ids, token mask, noise) from one
    captured inference: the cuda group's inputs, except that a group whose vision stage
    letterboxes the cameras itself (compiler/device_letterbox.py) reads frames and tables where
    the reference reads pixels; those pixels are made here from the same bytes by the device
    kernel's definition (ops/letterbox.py), so every path computes on the same pixels."""
    from lamp_ros.ops.letterbox import letterbox_reference
    vision = graph.node(group.nodes[0])
    if 'letterbox' not in vision.attrs:
        return [captured[name] for name in group.inputs]
    *frames, tables = vision.inputs
    geometry = np.asarray(captured[tables])
    size = geometry.shape[-2]
    pixels = np.stack([np.zeros((size, size, 3), np.uint8) if captured.get(f) is None
                       else letterbox_reference(captured[f], geometry[0, i])  # absent: black
                       for i, f in enumerate(frames)])[None]
    return [pixels, *(captured[v] for v in group.inputs if v not in vision.inputs)]


def full_prompt_feeds(runtime, axis):
    """Feeds of the bench's observation with a prompt long enough that only the full-length
    graph holds it (backends/text_lengths.py), and its count of valid tokens: the figure at
    the issue's 200 prompt tokens, beside the bench's own prompt's."""
    from lamp_ros.runtime.loop import synthetic_observation
    observation = synthetic_observation(runtime)
    for words in range(axis.full, 0, -4):
        feeds = runtime.feeds({**observation, 'prompt': ' '.join(['cube'] * words)}, 0.0)
        captured = {}
        runtime.reset()
        try:
            runtime.run(feeds, capture=captured)
        except ValueError:  # more tokens than the full length: the tokenizer refuses to cut
            continue
        mask = np.asarray(captured[axis.mask])
        if axis.length_for(mask) == axis.full:
            return feeds, int(mask.sum())
        break
    raise RuntimeError(f'no prompt of repeated words needs all {axis.full} tokens')


def runner_of(runtime, group):
    (runner,) = [r for g, r in runtime.inference_runners if g.name == group.name]
    return runner


def kernel_table(runtime, path: str) -> None:
    """Kernel-level profile of one call of the artifact's exported program (outside its graph)
    at the prompt length the bench's last inference ran (the full one without text lengths)."""
    from torch.profiler import profile, ProfilerActivity
    (group,) = [g for g, _ in runtime.inference_runners if g.backend == 'cuda']
    runner = runner_of(runtime, group)
    length = getattr(runner, 'last_text_length', None)
    inputs = runner.at_length(runner.static_in, length) if length else runner.static_in
    with torch.no_grad():
        runner.module(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            runner.module(*inputs)
            torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by='cuda_time_total', row_limit=40)
    kernels = sum(e.count for e in prof.key_averages() if e.device_type.name == 'CUDA')
    at = f' (prompt length {length})' if length else ''
    with open(path, 'w') as f:
        f.write(f'kernel launches in one inference{at}: {kernels}\n{table}\n')
    print(f'kernel launches per inference: {kernels} (table in {path})', flush=True)


def inference_trace(artifact: str, path: str) -> dict:
    """One whole inference as a tick runs it, traced with CPU and CUDA activity in a process
    of its own (lamp_ros/whitebox/kernel_profile.py) -> its Chrome trace at `path` (gzipped
    when it ends in .gz) and the kernel timeline beside it; returns the timeline's summary."""
    from bench.gpu_pi05_plots import kernel_timeline
    from lamp_ros.whitebox.kernel_profile import trace
    from lamp_ros.whitebox.op_profile import read_trace
    done = trace(artifact, path, cpu=True)
    png = path.split('.json')[0] + '.png'
    summary = kernel_timeline(read_trace(path), png,
                              title=f"lamp artifact {done['artifact_id'][:8]}, one inference")
    print(f"trace: {path} and {png} ({summary['gpu_events']} GPU events over "
          f"{summary['span_ms']:.2f} ms)", flush=True)
    return summary


def draw_paths(report: dict, out: str, strict: bool = False) -> None:
    """The report's chart beside it; a picture failing costs nothing measured (`strict`, the
    smoke: it fails the run)."""
    from bench.gpu_pi05_plots import paths_chart
    png = out.rsplit('.json', 1)[0] + '.png'
    try:
        paths_chart(report, png)
    except Exception as exc:
        if strict:
            raise
        print(f'paths chart failed: {type(exc).__name__}: {exc}', flush=True)


def reference_model(cfg, spec: dict, device: str = 'cuda', dtype=torch.bfloat16):
    """The eager policy's modules with the artifact's weights (same seeds, drawn on the CPU)."""
    start = time.perf_counter()
    with torch.device(device):
        model = Pi05Model(cfg).to(dtype).eval()
    init_weights(model, int(spec['weights']['seed']), spec['weights'].get('stage_seeds') or {})
    where = 'the GPU' if device == 'cuda' else device
    print(f'reference {cfg.name} on {where} in {time.perf_counter() - start:.1f} s', flush=True)
    return model


def smoke_config(spec: dict | None):
    """The smoke's policy config: the preset (and Euler steps) the artifact was built from,
    pi05_tiny without one (--compile-only)."""
    options = ((spec or {}).get('policy') or {}).get('options') or {}
    steps = {'num_steps': int(options['num_steps'])} if 'num_steps' in options else {}
    return get_preset(options.get('preset', 'pi05_tiny'), **steps)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--artifact', default='')
    parser.add_argument('--out', default='bench/results/gpu_pi05.json')
    parser.add_argument('--runs', type=int, default=None, help='timed runs (30; smoke 3)')
    parser.add_argument('--torch-compile', action='store_true')
    parser.add_argument('--lamp-only', action='store_true',
                        help="lamp's figures alone (no baselines, so no ratios or parity)")
    parser.add_argument('--kernels-out', default='')
    parser.add_argument('--trace-out', default='',
                        help='Chrome trace of one inference (.json or .json.gz) and its '
                             'kernel timeline (.png beside it)')
    parser.add_argument('--compile-cache', default='')
    parser.add_argument('--compile-only', action='store_true')
    parser.add_argument('--compile-scope', choices=('whole', 'stages'), default='whole')
    parser.add_argument('--smoke', action='store_true',
                        help='the CPU smoke: a smoke-spec artifact on the CPU (module doc)')
    args = parser.parse_args()
    smoke = args.smoke
    device, dtype = ('cpu', torch.float32) if smoke else ('cuda', torch.bfloat16)
    runs, warmup = args.runs or (3 if smoke else 30), 1 if smoke else 5
    backend = 'aot_eager' if smoke else 'inductor'  # the torch.compile baseline's
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.compile_only:
        cfg = smoke_config(None) if smoke else get_preset('pi05_full')
        compile_only(cfg, args.compile_cache, args.compile_scope, device, dtype, backend)
        return
    if not args.artifact:
        parser.error('--artifact is required (unless --compile-only)')
    with open(os.path.join(args.artifact, 'spec.json')) as f:
        spec = json.load(f)
    with open(os.path.join(args.artifact, 'evidence', 'build.json')) as f:
        build = json.load(f)
    cfg = smoke_config(spec) if smoke else get_preset('pi05_full')
    runtime, group, x, lamp_out, results, lamp_peak, text = load_artifact(
        args.artifact, runs, device, warmup)
    print(f"lamp: {results['lamp'][0]:.2f} ms " + (
        '(wall time of the artifact\'s onnxruntime group: CPU smoke)' if smoke else
        "(GPU time of the artifact's CUDA graph)"), flush=True)
    for key in ('lamp_inference', 'lamp_full_prompt', 'lamp_full_prompt_inference'):
        if key in results:
            print(f'{key}: {results[key][0]:.2f} ms (p99 {results[key][1]:.2f})', flush=True)
    if text:
        print(f'prompt lengths: {text}', flush=True)
    if smoke and (args.kernels_out or args.trace_out):
        print('kernel table and inference trace: not taken (CPU smoke: the CUDA group\'s '
              'kernels through CUPTI need the GPU)', flush=True)
    elif args.kernels_out:
        try:
            kernel_table(runtime, args.kernels_out)
        except Exception as exc:  # the profile is a diagnostic, not a figure
            print(f'kernel table failed: {type(exc).__name__}: {exc}', flush=True)
    if args.trace_out and not smoke:
        try:
            inference_trace(args.artifact, args.trace_out)
        except Exception as exc:  # a diagnostic too
            print(f'inference trace failed: {type(exc).__name__}: {exc}', flush=True)
    outs, not_measured, infos = {}, {}, {'hf_eager_info': {}, 'torch_compile_info': {}, **text}
    if not args.torch_compile:
        not_measured['torch_compile_ms'] = 'not run: pass --torch-compile (minutes of autotuning)'
    if smoke:
        not_measured.update(SMOKE_NOT_MEASURED)

    def save(pending=()):
        """Write the report so far (after every path: a run killed by a time limit keeps what
        it measured; `pending` names the paths still to come)."""
        report = make_report(cfg, runtime, group, build, results, outs, lamp_out, lamp_peak,
                             {**not_measured, **{f'{p}_ms': 'pending: the run ended before it'
                                                 for p in pending}}, infos, device)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            json.dump(report, f, indent=1)
        return report

    todo = ['eager'] + ([] if smoke else ['eager_graph']) + (
        ['torch_compile'] if args.torch_compile else []) + ['hf_eager']
    if args.lamp_only:
        not_measured.update({f'{p}_ms': 'not run: --lamp-only' for p in ['torch_compile', *todo]})
        not_measured['parity_max_rel_error'] = ('not run: --lamp-only (the build measured it: '
                                                'evidence/parity.json)')
        draw_paths(save(), args.out, strict=smoke)
        return
    save(todo)  # lamp's own figures first: a run stopped in the baselines still keeps them
    model = reference_model(cfg, spec, device, dtype)

    def eager(*a):
        return model.sample_actions(*a)

    paths = [('eager', eager)] + ([] if smoke else [('eager_graph', cuda_graph(eager, x))])
    for name, fn in paths:
        *results[name], outs[name] = time_it(fn, x, runs, warmup)
        print(f'{name}: {results[name][0]:.2f} ms', flush=True)
        todo.remove(name)
        save(todo)
    # torch.compile before HF eager: of the two it is the figure the ratio needs
    if args.torch_compile:
        from bench.baselines import torch_compile
        fn, infos['torch_compile_info'] = torch_compile(model, x, cache=args.compile_cache,
                                                        scope=args.compile_scope,
                                                        backend=backend)
        if args.compile_scope == 'stages' and not smoke:  # inductor's CUDA graphs are off:
            fn = cuda_graph(fn, x)  # one of our own
            infos['torch_compile_info']['cuda_graph'] = 'one, around the whole call (bench)'
        *results['torch_compile'], out = time_it(fn, x, runs, warmup)
        outs['torch_compile'] = out.clone()  # a CUDA graph's output buffer, freed below
        print(f"torch_compile: {results['torch_compile'][0]:.2f} ms "
              f"(compiled in {infos['torch_compile_info'].get('compile_s', 0):.0f} s)",
              flush=True)
        del fn
        if not smoke:
            torch.cuda.empty_cache()
        todo.remove('torch_compile')
        save(todo)
    try:
        from bench.baselines import hf_eager
        fn, infos['hf_eager_info'] = hf_eager(cfg, device, dtype)
        *results['hf_eager'], _ = time_it(fn, x, runs, warmup)
        print(f"hf_eager: {results['hf_eager'][0]:.2f} ms", flush=True)
        del fn
        if not smoke:
            torch.cuda.empty_cache()
    except Exception as exc:  # a baseline failing must not cost the other figures
        if smoke and getattr(exc, 'name', None) != 'transformers':
            raise  # in the smoke, whose point is to fail on it (transformers may be absent)
        not_measured['hf_eager_ms'] = f'{type(exc).__name__}: {exc}'
        print(f'hf_eager not measured: {not_measured["hf_eager_ms"]}', flush=True)
    todo.remove('hf_eager')
    report = save(todo)
    draw_paths(report, args.out, strict=smoke)
    ms, lamp_ms = report['median_ms'], report['lamp_ms']
    for key in ('hf_eager', 'eager', 'eager_graph', 'torch_compile', 'lamp', 'lamp_inference',
                'lamp_inference_serial', 'lamp_gpu_overlapped', 'lamp_full_prompt',
                'lamp_full_prompt_inference'):
        if key in ms:
            print(f'{key:16s} median {ms[key]:9.2f} ms  p99 {results[key][1]:9.2f} ms  '
                  f'x{ms[key] / lamp_ms:6.2f} of lamp')
    stages = report['lamp_stage_p50_ms']
    print('lamp stages (p50 ms): ' + ', '.join(f'{k} {v:.2f}' for k, v in stages.items()))
    for key in ('roofline_ms', 'pct_of_roofline', 'parity_max_rel_error', 'lamp_peak_memory_gb',
                'build_total_s'):
        print(f'{key:28s} ' + ('null' if report[key] is None else f'{report[key]:.4g}'))
    for key in ('lamp_prompt_tokens', 'lamp_text_length', 'lamp_full_prompt_tokens',
                'lamp_text_lengths'):
        if key in report:
            print(f'{key:28s} {report[key]}')


def synthetic_inputs(cfg, device: str = 'cuda') -> list:
    """The cuda group's inputs as the host stages hand them over (uint8 pixels, float32 noise,
    int64 token ids, bool masks) at the config's shapes. torch.compile specialises on
    shapes and dtypes only (the reference has no value-dependent Python branches), so a
    compile on these is the compile the bench's real inputs reuse."""
    gen = torch.Generator(device=device).manual_seed(0)
    cams, size, n = len(cfg.camera_slots), cfg.vision.image_size, cfg.max_token_len
    on = dict(device=device)
    return [torch.randint(0, 256, (1, cams, size, size, 3), generator=gen, dtype=torch.uint8,
                          **on),
            torch.ones(1, cams, dtype=torch.bool, **on),
            torch.randint(0, cfg.vocab_size, (1, n), generator=gen, **on),
            torch.arange(n, **on)[None] < n // 10,
            torch.randn(1, cfg.action_horizon, cfg.action_dim, generator=gen, **on)]


def stage_times(profile: dict) -> dict:
    """p50 ms of every group and node of the artifact's timed runs ('group:g03_cuda',
    'node:preprocess_image.base', ...): where lamp_inference's time beyond lamp_ms goes."""
    return {f'{kind[:-1]}:{name}': stats['p50_ms'] for kind in ('groups', 'nodes')
            for name, stats in sorted(profile[kind].items()) if stats}


def compile_only(cfg, cache: str, scope: str = 'whole', device: str = 'cuda',
                 dtype=torch.bfloat16, backend: str = 'inductor') -> None:
    """The torch.compile baseline's cold compile alone, its cache saved for a later run."""
    if not cache:
        raise SystemExit('--compile-only needs --compile-cache')
    from bench.baselines import torch_compile
    model = reference_model(cfg, {'weights': {'seed': 0}}, device, dtype)
    _, info = torch_compile(model, synthetic_inputs(cfg, device), cache=cache, scope=scope,
                            backend=backend)
    print(f"torch_compile: compiled in {info['compile_s']:.0f} s; cache {info.get('cache')}",
          flush=True)


def make_report(cfg, runtime, group, build, results, outs, lamp_out, lamp_peak, not_measured,
                infos, device: str = 'cuda') -> dict:
    """gpu_pi05.json from what has been measured (keys of paths not yet run are None); on the
    CPU (the smoke) with its CPU's name, float32 and no GPU memory."""
    on_gpu = device == 'cuda'
    roof = roofline(cfg)
    ref = outs.get('eager')  # the parity reference; None until the eager path has run
    if ref is None:
        not_measured = {'parity_max_rel_error': 'pending: needs the eager path', **not_measured}
    ms = {k: v[0] for k, v in results.items()}
    lamp_ms = ms['lamp']
    report = {
        'device': torch.cuda.get_device_name() if on_gpu else cpu_name(),
        'torch': torch.__version__,
        'artifact_id': runtime.id, 'build_seconds': build['stage_seconds'],
        'build_total_s': sum(build['stage_seconds'].values()),
        'kernels': group.build.get('kernels', {}), 'tiles': group.build.get('tiles', {}),
        'tuning': build.get('groups', {}).get(group.name, {}).get('tuning', {}),
        'shapes': {'cameras': 3, 'image': cfg.vision.image_size,
                   'prompt_tokens': cfg.max_token_len, 'horizon': cfg.action_horizon,
                   'steps': cfg.num_steps, 'dtype': 'bf16' if on_gpu else 'fp32'},
        'hf_eager_ms': ms.get('hf_eager'), 'torch_compile_ms': ms.get('torch_compile'),
        'lamp_ms': lamp_ms, 'roofline_ms': roof['total_ms'],
        'parity_max_rel_error': None if ref is None else rel_error(lamp_out, ref),
        'parity_max_abs_error': None if ref is None else
        float((lamp_out.float() - ref.float()).abs().max()),
        'p99_ms': {k: v[1] for k, v in results.items()},
        'median_ms': ms,
        'ratios_vs_lamp': {k: v / lamp_ms for k, v in ms.items() if k != 'lamp'},
        'pct_of_roofline': 100 * roof['total_ms'] / lamp_ms, 'roofline': roof,
        'lamp_peak_memory_gb': lamp_peak,
        'lamp_stage_p50_ms': stage_times(runtime.profile()),
        'lamp_phases': getattr(runner_of(runtime, group), 'phases', None),
        'process_peak_memory_gb': torch.cuda.max_memory_allocated() / 1e9 if on_gpu else None,
        **infos, 'not_measured': not_measured,
        'provenance': provenance(device),
    }
    if not on_gpu:
        report['smoke'] = SMOKE_NOTE
    if 'torch_compile' in outs and ref is not None:
        report['parity_rel_error_torch_compile'] = rel_error(outs['torch_compile'], ref)
    return report


if __name__ == '__main__':
    main()
