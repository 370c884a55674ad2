"""How much faster do the vision's and the prefix's GEMMs run on the cuBLASLt algorithm that
measures fastest, instead of the one cuBLASLt's heuristic ranks first (torch's choice)?

For every GEMM shape of the full policy outside the expert (the expert's GEMMs are lamp's own
kernels), in the form the artifact runs it (weight layout, bias / GELU / residual epilogue,
FP8 with row scales and fast or float32 sums; and the FP8 ones with one scale an operand),
this asks cuBLASLt for its ranked algorithm list (lamp_ros/kernels/cublaslt.py), runs each
algorithm once against torch's op to check the numbers, and times it as the build times tiles:
one CUDA-graph launch over distinct weights (`--layers` of them, so they come from HBM as in
the inference). Also the vision's patch embedding: the Conv2d today against the same product as
one GEMM over the unfolded patches.

    python3 scripts/device/cublaslt_probe.py [--out FILE.json] [--algos 32] [--layers 8]
        [--only NAME,...] [--prefix-rows 832,896,968]
"""

import argparse
import os
import sys
import time

import torch
from torch.nn import functional as F

sys.path.insert(0, os.getcwd())
from bench.probes import save_report  # noqa: E402
from lamp_ros.kernels import cublaslt  # noqa: E402
from lamp_ros.kernels import tuning  # noqa: E402

DEV, BF, E4M3 = 'cuda', torch.bfloat16, torch.float8_e4m3fn
# name: (GemmSpec, calls an inference) in the form the artifact runs them (plan.json's layouts)
SHAPES = {
    'vision qkv': (cublaslt.GemmSpec(768, 3456, 1152, 'bias'), 27),
    'vision out_proj': (cublaslt.GemmSpec(768, 1152, 1152, 'bias', weight_kn=True), 27),
    'vision fc1': (cublaslt.GemmSpec(768, 4304, 1152, 'gelu_bias'), 27),
    'vision fc2': (cublaslt.GemmSpec(768, 1152, 4304, 'bias', weight_kn=True), 27),
    'prefix qkv': (cublaslt.GemmSpec(968, 2560, 2048, weight_kn=True), 17),
    'prefix o': (cublaslt.GemmSpec(968, 2048, 2048, residual=True), 17),
    'prefix attention q k^T': (cublaslt.GemmSpec(7744, 968, 256), 17),
    'prefix attention p v': (cublaslt.GemmSpec(7744, 256, 968, weight_kn=True), 17),
    'prefix gate_up fp8': (cublaslt.GemmSpec(968, 32768, 2048, fp8=True,
                                             fast_accumulation=True), 17),
    'prefix down fp8': (cublaslt.GemmSpec(968, 2048, 16384, fp8=True), 17),
    # the same with one scale per operand (the row scales, powers of two, applied by the GEMM's
    # reader instead; bit for bit the same numbers: bench/results/h200_fp8_scaling/), where
    # the heuristic offers more than its one row-scaled algorithm
    'prefix gate_up fp8 scalar': (cublaslt.GemmSpec(968, 32768, 2048, fp8=True,
                                                    fast_accumulation=True,
                                                    fp8_scale='scalar'), 17),
    'prefix down fp8 scalar': (cublaslt.GemmSpec(968, 2048, 16384, fp8=True,
                                                 fp8_scale='scalar'), 17),
}


def prefix_shapes(rows: int) -> dict:
    """The prefix's GEMMs as the artifact runs them at `rows` (768 image rows plus the prompt
    length a graph of fusion.text_lengths was captured for: 832 and 896 for [64, 128], 968 at
    the full 200): q/k/v stored (in, out), o without its residual (the MLP's norm kernel adds
    it), the attention's two GEMMs over 8 query heads as rows, the FP8 MLP GEMMs. torch's choice
    for o took 18.2 us at 832 rows against 14.0 at 896 (gemm_layout_probe.py --prefix-rows)."""
    return {
        f'prefix qkv {rows}': (cublaslt.GemmSpec(rows, 2560, 2048, weight_kn=True), 17),
        f'prefix o {rows}': (cublaslt.GemmSpec(rows, 2048, 2048), 17),
        f'prefix attention q k^T {rows}': (cublaslt.GemmSpec(8 * rows, rows, 256), 17),
        f'prefix attention p v {rows}': (cublaslt.GemmSpec(8 * rows, 256, rows, weight_kn=True),
                                         17),
        f'prefix gate_up fp8 {rows}': (cublaslt.GemmSpec(rows, 32768, 2048, fp8=True,
                                                         fast_accumulation=True), 17),
        f'prefix down fp8 {rows}': (cublaslt.GemmSpec(rows, 2048, 16384, fp8=True), 17),
    }


def torch_op(spec, x, w, b, r, xs, ws):
    """What the artifact runs today for this GEMM (torch picks cuBLASLt's first algorithm)."""
    if spec.fp8:
        ws = ws if spec.fp8_scale == 'scalar' else ws.view(1, -1)
        return torch._scaled_mm(x, w.t(), xs, ws, out_dtype=BF,
                                use_fast_accum=spec.fast_accumulation)
    wt = w if spec.weight_kn else w.t()
    if spec.epilogue == 'gelu_bias':
        return torch._addmm_activation(b, x, wt, use_gelu=True)
    if spec.epilogue == 'bias':
        return torch.addmm(b, x, wt)
    if spec.residual:
        return torch.addmm(r, x, wt)
    return torch.mm(x, wt)


def operands(spec, layers):
    g = torch.Generator(device=DEV).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device=DEV, generator=g)
    wshape = (spec.k, spec.n) if spec.weight_kn else (spec.n, spec.k)
    if spec.fp8:
        x = (randn(spec.m, spec.k) * 8).to(E4M3)
        ws = [(randn(*wshape) * 8).to(E4M3) for _ in range(layers)]
        if spec.fp8_scale == 'scalar':
            xs = torch.tensor(1 / 64, device=DEV)
            wss = [torch.tensor(1 / 128, device=DEV) for _ in range(layers)]
        else:
            xs = torch.rand(spec.m, 1, device=DEV, generator=g) / 64 + 1 / 128
            wss = [torch.rand(spec.n, device=DEV, generator=g) / 64 + 1 / 128
                   for _ in range(layers)]
    else:
        x = randn(spec.m, spec.k).to(BF)
        ws = [(randn(*wshape) / spec.k ** 0.5).to(BF) for _ in range(layers)]
        xs, wss = None, [None] * layers
    bs = [(randn(spec.n) / 10).to(BF) for _ in range(layers)]
    r = randn(spec.m, spec.n).to(BF)
    return x, ws, bs, r, xs, wss


def probe_shape(name, spec, calls, layers, count, report):
    plan = cublaslt.Plan(spec)
    x, ws, bs, r, xs, wss = operands(spec, layers)
    if spec.fp8:
        plan.scales(xs, wss[0])
    algos = plan.algorithms(count)
    out = torch.empty(spec.m, spec.n, dtype=BF, device=DEV)
    workspace = torch.empty(cublaslt.WORKSPACE_BYTES, dtype=torch.uint8, device=DEV)
    want = torch_op(spec, x, ws[0], bs[0], r, xs, wss[0]).float()

    def lt(algo):
        stream = torch.cuda.current_stream().cuda_stream
        for w, b, s in zip(ws, bs, wss):
            plan.run(algo, x, w, out, workspace, bias=b if spec.epilogue != 'none' else None,
                     residual=r if spec.residual else None, x_scale=xs, w_scale=s,
                     stream=stream)
    t_torch = tuning.gpu_time_ms(
        lambda: [torch_op(spec, x, w, b, r, xs, s) for w, b, s in zip(ws, bs, wss)])
    rows = []
    for i, algo in enumerate(algos):
        try:
            plan.run(algo, x, ws[0], out, workspace,
                     bias=bs[0] if spec.epilogue != 'none' else None,
                     residual=r if spec.residual else None, x_scale=xs, w_scale=wss[0],
                     stream=torch.cuda.current_stream().cuda_stream)
            err = tuning.disagreement(out, want)
            ms = tuning.gpu_time_ms(lambda: lt(algo))
            rows.append({'rank': i, 'us': round(ms * 1e3 / layers, 2), 'rel_err': err,
                         'algo': algo.data.hex()})
        except (cublaslt.CublasLtError, RuntimeError) as e:
            rows.append({'rank': i, 'error': str(e).splitlines()[0]})
    t_torch_again = tuning.gpu_time_ms(
        lambda: [torch_op(spec, x, w, b, r, xs, s) for w, b, s in zip(ws, bs, wss)])
    timed = [row for row in rows if 'us' in row and row['rel_err'] < 3e-2]
    best = min(timed, key=lambda row: row['us']) if timed else None
    torch_us = round(min(t_torch, t_torch_again) * 1e3 / layers, 2)
    entry = {'spec': spec.__dict__, 'calls_per_inference': calls, 'torch_us': torch_us,
             'torch_us_runs': [round(t * 1e3 / layers, 2) for t in (t_torch, t_torch_again)],
             'algorithms': len(algos), 'rank0_us': rows[0].get('us') if rows else None,
             'best': best, 'timings': rows}
    if best:
        entry['saved_us_per_inference'] = round((torch_us - best['us']) * calls, 1)
    report['gemms'][name] = entry
    print(f'{name:24s} torch {torch_us:7.2f} us, rank 0 {entry["rank0_us"]}, '
          f'{len(algos)} algorithms, best {best and best["us"]} (rank {best and best["rank"]}, '
          f'err {best and best["rel_err"]:.2g}); x{calls}: '
          f'{entry.get("saved_us_per_inference")} us an inference', flush=True)


def probe_patch_embed(report):
    """The vision's patch embedding: Conv2d (stride = kernel = 14) on the NCHW view of the NHWC
    pixels, against the same product as one GEMM over the patches unfolded from NHWC."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 1152, 14, stride=14).to(DEV, BF)
    pix = torch.randn(3, 224, 224, 3, device=DEV).to(BF)
    w = conv.weight.detach().permute(0, 2, 3, 1).reshape(1152, 588).contiguous()
    b = conv.bias.detach()

    def as_conv():
        return conv(pix.permute(0, 3, 1, 2)).flatten(2).transpose(1, 2)

    def unfold():
        return pix.view(3, 16, 14, 16, 14, 3).permute(0, 1, 3, 2, 4, 5).reshape(768, 588)

    def as_gemm():
        return F.linear(unfold(), w, b).view(3, 256, 1152)
    w592 = F.pad(w, (0, 4)).contiguous()
    p_once = unfold()

    def as_gemm_k592():  # rows padded to 592 (1,184 bytes: 16-byte aligned; 588 x 2 is not)
        return F.linear(F.pad(unfold(), (0, 4)), w592, b).view(3, 256, 1152)
    with torch.no_grad():
        err = tuning.disagreement(as_gemm(), as_conv().float())
        report['patch_embed'] = {
            'conv_us': round(tuning.gpu_time_ms(as_conv) * 1e3, 2),
            'gemm_us': round(tuning.gpu_time_ms(as_gemm) * 1e3, 2), 'rel_err': err,
            'unfold_us': round(tuning.gpu_time_ms(unfold) * 1e3, 2),
            'gemm_alone_us': round(tuning.gpu_time_ms(lambda: F.linear(p_once, w, b)) * 1e3, 2),
            'gemm_k592_us': round(tuning.gpu_time_ms(as_gemm_k592) * 1e3, 2),
            'rel_err_k592': tuning.disagreement(as_gemm_k592(), as_conv().float())}
    print('patch embed:', report['patch_embed'], flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='cublaslt_probe.json')
    parser.add_argument('--algos', type=int, default=32)
    parser.add_argument('--layers', type=int, default=8)
    parser.add_argument('--only', default='', help='comma-separated shape names')
    parser.add_argument('--prefix-rows', default='',
                        help='comma-separated row counts: the prefix GEMMs alone at each '
                             '(prefix_shapes), instead of SHAPES')
    args = parser.parse_args()
    shapes = SHAPES
    if args.prefix_rows:
        shapes = {name: entry for rows in map(int, args.prefix_rows.split(','))
                  for name, entry in prefix_shapes(rows).items()}
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__,
              'cublaslt_version': cublaslt.version(), 'layers': args.layers, 'gemms': {}}
    print(f'cuBLASLt {report["cublaslt_version"]} on {report["gpu"]}', flush=True)
    probe_patch_embed(report)
    save_report(report, args.out)
    only = [s for s in args.only.split(',') if s]
    for name, (spec, calls) in shapes.items():
        if only and name not in only:
            continue
        t0 = time.time()
        probe_shape(name, spec, calls, args.layers, args.algos, report)
        print(f'  ({time.time() - t0:.0f} s)', flush=True)
        save_report(report, args.out)
    total = sum(e.get('saved_us_per_inference', 0) for e in report['gemms'].values())
    report['saved_us_per_inference'] = round(total, 1)
    print(f'all shapes: {total:.0f} us an inference on the fastest algorithms', flush=True)
    save_report(report, args.out)


if __name__ == '__main__':
    main()
