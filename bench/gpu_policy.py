"""Any policy's compiled cuda artifact against its own model stages in PyTorch, on one GPU.

    python3 bench/gpu_policy.py --spec config/specs/act_small_cuda.yaml --artifact DIR \
        [--runs 200] [--out FILE] [--device cpu --compile-backend eager]

The spec's pipeline is traced once on its example observation (every value recorded), which
gives each model stage the inputs it gets in a real tick. Then, in one process and in turns:
- eager: the model stages called one after the other as the policy calls them (PyTorch on the
  GPU, as the Python prototype runs them), timed to the GPU's finish;
- torch.compile: the same stages compiled (mode reduce-overhead: its kernels in CUDA graphs;
  max-autotune's kernel search takes minutes a stage, more than a device call affords);
- lamp: the artifact's cuda groups, their CUDA graphs' GPU time (CUDA events around each
  replay), and the whole inference through the Runtime (host stages included).
Medians of `--runs` calls after warm-up; the card's name is in the report.

`--device cpu` (the device scripts' smoke, scripts/device/gpu_policy.sh): the same path with
a CPU artifact on the CPU, where there is no GPU time and no CUDA graph: eager and the whole
inference only, torch.compile with `--compile-backend eager` (Dynamo's capture without
Inductor's code generation, which takes minutes on a CPU).
"""

import argparse
import json
import operator
import statistics
import time

from lamp_ros.provenance import provenance


def median_ms(fn, runs: int, sync) -> float:
    for _ in range(5):
        fn()
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def model_calls(spec_path: str, device: str):
    """[(node id, module, args on `device`)] of the spec's model stages in graph order."""
    import torch

    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline
    pipeline = build_pipeline(load_spec(spec_path), device=device)
    values = {}
    graph = trace_pipeline(pipeline, pipeline.example_observation(), export=False,
                           values_out=values, hash_weights=False)
    calls = []
    for node in graph.nodes:
        if node.kind == 'model':
            module = operator.attrgetter(node.attrs['module'])(pipeline.policy).eval()
            args = [torch.as_tensor(values[v]).to(device) for v in node.inputs]
            calls.append((node.id, module, args))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--spec', required=True)
    parser.add_argument('--artifact', required=True)
    parser.add_argument('--runs', type=int, default=200)
    parser.add_argument('--out', default='')
    parser.add_argument('--device', choices=('cuda', 'cpu'), default='cuda')
    parser.add_argument('--compile-backend', default='inductor',
                        help='torch.compile\'s backend (eager: capture only, for a CPU smoke)')
    args = parser.parse_args()
    import torch

    from lamp_ros.runtime import Runtime
    from lamp_ros.runtime.loop import synthetic_observation
    on_gpu = args.device == 'cuda'
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    calls = model_calls(args.spec, args.device)

    def eager():
        with torch.inference_mode():
            for _, module, inputs in calls:
                module(*inputs)

    report = {'device': torch.cuda.get_device_name() if on_gpu else provenance('cpu')['card'],
              'torch': torch.__version__, 'spec': args.spec, 'stages': [c[0] for c in calls],
              'runs': args.runs, 'torch_compile_backend': args.compile_backend}
    report['eager_ms'] = median_ms(eager, args.runs, sync)
    start = time.perf_counter()
    # reduce-overhead (CUDA graphs) is Inductor's mode; another backend takes none
    mode = {'mode': 'reduce-overhead'} if args.compile_backend == 'inductor' else {}
    compiled = [(n, torch.compile(m, backend=args.compile_backend, **mode), a)
                for n, m, a in calls]

    def compiled_run():
        with torch.inference_mode():
            for _, module, inputs in compiled:
                module(*inputs)
    compiled_run()
    sync()
    report['torch_compile_first_call_s'] = round(time.perf_counter() - start, 1)
    report['torch_compile_ms'] = median_ms(compiled_run, args.runs, sync)
    runtime = Runtime.load(args.artifact, execution='sync')
    cuda = [r for g, r in runtime.inference_runners if g.backend == 'cuda']
    if on_gpu and not cuda:
        raise SystemExit(f'{args.artifact}: no cuda group to time')
    feeds = runtime.feeds(synthetic_observation(runtime), 0.0)
    gpu = []

    def lamp():
        runtime.reset()
        runtime.run(feeds)
        gpu.append(sum(r.last_device_ms for r in cuda))
    report['lamp_inference_ms'] = median_ms(lamp, args.runs, sync)
    report['artifact_id'] = runtime.id
    if cuda:  # a CPU artifact has no GPU time to compare
        report['lamp_gpu_ms'] = statistics.median(gpu[5:])
        for key in ('eager_ms', 'torch_compile_ms'):
            report[f'lamp_gpu_speedup_vs_{key[:-3]}'] = round(
                report[key] / report['lamp_gpu_ms'], 2)
    report['provenance'] = provenance(args.device)
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
