"""The `lamp::` kernels on the GPU: match their reference at the policy's shapes, and time them
against the eager op chains they replace (GPU time of CUDA-graph replays, as the artifact runs).
The expert's five-kernel layer (triton_expert_gemm.py, triton_attention.py) is tuned here as
the lowering tunes it, every candidate's time printed, and checked in bf16 with the chosen
tiles.

Usage: python3 scripts/device/kernels_check.py [--smoke] [fp8 | norms | lt_linear | letterbox]
(one line per kernel and shape; a name checks that group alone)

--smoke (the CPU smoke of scripts/device/lib.sh): the same comparisons in Triton's interpreter
on CPU tensors, at small shapes of the same forms, in float32 (the interpreter multiplies
bfloat16 dot operands as raw bits and truncates casts to bfloat16:
test/kernels/test_triton_kernels.py), no timings (n/a). The operators hand CPU tensors to their
references, so the smoke calls the Triton function each operator's CUDA branch calls. What only
a GPU runs is not checked, with the reason printed: the FP8 linear (torch._scaled_mm), the
vision fc1's GELU epilogue and `lamp::lt_linear` (cuBLASLt). FP8 codes may differ from the
reference where the interpreter's float8 cast carries into the next power of two (half the
value) or lands one step off; the GPU's may not.
"""
# smoke: run by full_gpu.sh

import argparse
import os
import sys

if __name__ == '__main__' and '--smoke' in sys.argv[1:]:
    os.environ['TRITON_INTERPRET'] = '1'  # before the kernel modules decorate their kernels

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from lamp_ros.policies.pi05.staged.expert_kernels import PARTS  # noqa: E402
from lamp_ros.kernels import operators as ops, triton_kernels, tuning  # noqa: E402

# pi05_full's shapes (the GPU's), and the smoke's small ones of the same forms
SHAPES = {
    'gpu': {'rms_norm': ((968, 2048), (50, 1024)),  # rows, width
            'rope': ((968, 8, 256), (50, 8, 256)),  # tokens, heads, head dim
            'geglu': ((968, 16384), (50, 4096)),  # rows, width
            'masked_softmax': ((968, 968), (50, 1018)),  # queries, keys (8 heads)
            'norms': ((768, 1152, True), (968, 2048, False)),  # rows, width, LayerNorm
            'fp8': (968, 2048, 16384),  # rows, width, MLP width
            'expert': {'rows': 50, 'width': 1024, 'heads': 8, 'd': 256, 'mlp': 4096,
                       'prefix': 968},
            'letterbox': 224},  # output size
    'smoke': {'rms_norm': ((9, 200), (5, 64)),
              'rope': ((7, 4, 32), (3, 2, 32)),
              'geglu': ((3, 1500), (5, 256)),
              'masked_softmax': ((5, 37), (3, 50)),
              'norms': ((6, 200, True), (5, 256, False)),
              'fp8': (12, 256, 512),
              'expert': {'rows': 16, 'width': 64, 'heads': 2, 'd': 32, 'mlp': 128,
                         'prefix': 37},
              'letterbox': 16},
}


class Where:
    """Where the kernels run: on the GPU in bf16 at pi05_full's shapes, timed; or in the smoke
    (Triton's interpreter on the CPU) in float32 at small shapes, untimed."""

    def __init__(self, smoke: bool):
        self.smoke = smoke
        self.device = 'cpu' if smoke else 'cuda'
        self.dtype = torch.float32 if smoke else torch.bfloat16
        self.shapes = SHAPES['smoke' if smoke else 'gpu']
        if smoke:
            from lamp_ros.kernels.interpreter_shim import index_shim
            index_shim()

    def time_ms(self, fn) -> float | None:
        """GPU time of `fn` from CUDA-graph replays; None in the smoke (no GPU clock)."""
        return None if self.smoke else tuning.gpu_time_ms(fn)

    def kernel(self, op):
        """`op` as it runs on the GPU: the operator itself on CUDA tensors; in the smoke the
        Triton call of its CUDA branch (lamp_ros/kernels/operators/), since the operator hands
        CPU tensors to its reference."""
        if not self.smoke:
            return op
        from lamp_ros.kernels import triton_attention, triton_expert_gemm, triton_premade
        gemm = triton_expert_gemm.expert_gemm

        def ada_linear(x, w, mod, b, eps, tiles, counters):
            return gemm(x, w, tiles, counters=counters, mod=mod, bias=b, eps=eps)

        def ada_geglu(x, w, w2, mod, b, b2, eps, tiles, counters):
            return gemm(x, w, tiles, counters=counters, weight2=w2, mod=mod, bias=b, bias2=b2,
                        eps=eps)

        def gated_linear(x, w, residual, gate, tiles, counters):
            return gemm(x, w, tiles, counters=counters, residual=residual, gate=gate)

        def premade_linear_rope(xm, pieces, w, b, cos, sin, heads, q_scale, eps, tiles):
            return triton_premade.premade_gemm(xm, pieces, w, b, eps, tiles,
                                               rope=(cos, sin, heads, q_scale))

        return {ops.layer_norm: lambda x, eps: triton_kernels.norm(x, eps, center=True),
                ops.letterbox: triton_kernels.letterbox, ops.ada_linear: ada_linear,
                ops.ada_geglu: ada_geglu, ops.gated_linear: gated_linear,
                ops.mqa_attention: triton_attention.mqa_attention,
                ops.mqa_attention_rotated: triton_attention.mqa_attention_rotated,
                ops.premade_linear_rope: premade_linear_rope}[op]

    def skip(self, what: str) -> bool:
        """True in the smoke, saying that `what` is not checked there."""
        if self.smoke:
            print(f'{what}: not checked in the smoke (needs the GPU)', flush=True)
        return self.smoke


def us(ms: float | None, width: int = 7) -> str:
    """Microseconds of a GPU time in `width` columns; n/a untimed (the smoke)."""
    return f'{ms * 1e3:{width}.1f}' if ms is not None else 'n/a'.rjust(width)


def ratio(slow: float | None, fast: float | None) -> str:
    return f'{slow / fast:5.1f}' if slow is not None and fast is not None else '  n/a'


def check(where, name, fast, reference, args, atol):
    got, want = fast(*args), reference(*args)
    err = float((got.float() - want.float()).abs().max())
    t_fast = where.time_ms(lambda: fast(*args))
    t_ref = where.time_ms(lambda: reference(*args))
    status = 'ok' if err <= atol else 'MISMATCH'
    print(f'{name:34s} max abs err {err:.3g} ({status}); kernel {us(t_fast)} us, '
          f'eager chain {us(t_ref)} us, x{ratio(t_ref, t_fast)}', flush=True)
    return err <= atol


def main(where) -> None:
    torch.manual_seed(0)
    dt, dev, shapes = where.dtype, where.device, where.shapes
    ok = True
    for rows, width in shapes['rms_norm']:
        x = torch.randn(1, rows, width, dtype=dt, device=dev)
        s, b = (torch.randn(width, dtype=dt, device=dev) * 0.1 for _ in range(2))
        ok &= check(where, f'rms_norm {rows}x{width}', triton_kernels.rms_norm,
                    ops.rms_norm_reference, (x, None, None, 1e-6), 0.07)
        ok &= check(where, f'ada_rms_norm {rows}x{width}', triton_kernels.rms_norm,
                    ops.rms_norm_reference, (x, s, b, 1e-6), 0.07)
    for n, heads, d in shapes['rope']:
        qkv = torch.randn(1, n, (heads + 2) * d, dtype=dt, device=dev)
        q = qkv[..., :heads * d].reshape(1, n, heads, d)
        pos = torch.arange(n, device=dev)[None]
        half = d // 2
        freq = 10000.0 ** (-torch.arange(half, device=dev, dtype=torch.float32) / half)
        angle = pos.float()[..., None] * freq
        ok &= check(where, f'rope {n}x{heads}x{d}', triton_kernels.rope, ops.rope_reference,
                    (q, angle.cos(), angle.sin()), 0.07)
        k = qkv[..., heads * d:(heads + 1) * d].reshape(1, n, 1, d)
        c, s_ = angle.cos(), angle.sin()
        pair = lambda: triton_kernels.rope(q, c, s_, k)  # noqa: E731
        apart = lambda: (triton_kernels.rope(q, c, s_), triton_kernels.rope(k, c, s_))  # noqa
        same = all(torch.equal(a, b) for a, b in zip(pair(), apart()))
        t_pair, t_apart = where.time_ms(pair), where.time_ms(apart)
        print(f'rope_qk {n}x({heads}+1)x{d}{"":13s} equal to two launches {same} '
              f'({"ok" if same else "MISMATCH"}); kernel {us(t_pair)} us, two launches '
              f'{us(t_apart)} us, x{ratio(t_apart, t_pair)}', flush=True)
        ok &= same
    for n, m in shapes['geglu']:
        gate, up = torch.randn(1, n, 2 * m, dtype=dt, device=dev).split(m, -1)
        ok &= check(where, f'geglu {n}x{m}', triton_kernels.geglu, ops.geglu_reference,
                    (gate, up), 0.3)
    for n, m in shapes['masked_softmax']:  # prefix and expert attention, 8 heads as rows
        scores = torch.randn(1, n * 8, m, dtype=dt, device=dev) * 8
        mask = torch.rand(1, n, m, device=dev) > 0.1
        ok &= check(where, f'masked_softmax {n}x8x{m}', triton_kernels.masked_softmax,
                    ops.masked_softmax_reference, (scores, mask, 8, 1 / 16), 0.01)
    ok &= check_norms(where)
    ok &= check_fp8(where)
    ok &= check_gelu_epilogue(where)
    ok &= check_expert_layer(where, **shapes['expert'])
    ok &= check_lt_linear(where)
    ok &= check_letterbox(where)
    print('all kernels match' if ok else 'SOME KERNELS DO NOT MATCH')
    raise SystemExit(0 if ok else 1)


def check_norms(where) -> bool:
    """lamp::layer_norm and lamp::add_norm at the shapes that run them (the vision's 768 x 1152
    LayerNorms, the prefix's 968 x 2048 RMSNorm after its FP8 down projection): the sum bit for
    bit as eager torch's add, the norm against float32, and the time against what they replace
    (torch's LayerNorm kernel; an add kernel, then the norm kernel)."""
    torch.manual_seed(0)
    dt, dev, ok = where.dtype, where.device, True
    for rows, width, center in where.shapes['norms']:
        x, r = (torch.randn(1, rows, width, dtype=dt, device=dev) * 4 for _ in range(2))
        kind = 'layer' if center else 'rms'
        if center:
            ok &= check(where, f'layer_norm {rows}x{width}', where.kernel(ops.layer_norm),
                        lambda v, eps: F.layer_norm(v, (width,), eps=eps), (x, 1e-6), 0.07)
            separate = lambda: F.layer_norm(x + r, (width,), eps=1e-6)  # noqa: E731
        else:
            separate = lambda: triton_kernels.rms_norm(x + r, None, None, 1e-6)  # noqa: E731
        total, normed = triton_kernels.norm(x, 1e-6, r, center)
        want_total, want = ops.add_norm_reference(x.float(), r.float(), 1e-6, center)
        same_sum = bool(torch.equal(total, x + r))
        err = float((normed.float() - want).abs().max())
        t_fused = where.time_ms(lambda: triton_kernels.norm(x, 1e-6, r, center))
        t_separate = where.time_ms(separate)
        status = 'ok' if same_sum and err <= 0.07 else 'MISMATCH'
        print(f'add_norm ({kind}) {rows}x{width:<14d} sum equal to eager {same_sum}, norm max '
              f'abs err {err:.3g} ({status}); kernel {us(t_fused)} us, add + norm '
              f'{us(t_separate)} us, x{ratio(t_separate, t_fused)}', flush=True)
        ok &= status == 'ok'
    return ok


def fp8_codes_agree(where, codes, want_codes, allowed: float) -> tuple:
    """(codes differing, at most how many E4M3 steps, fine): at most `allowed` of the codes one
    step off. In the smoke every code within a step, or the interpreter's carried half."""
    got = codes.float()
    differ = int((got != want_codes).sum())
    off = ops.e4m3_steps(got, want_codes)
    steps = float(off.max())
    if where.smoke:  # Triton's interpreter casts to float8 its own way (module doc)
        carried = (got * 2 == want_codes) & (torch.frexp(want_codes)[0].abs() == 0.5)
        return differ, steps, bool((carried | (off <= 1)).all())
    return differ, steps, differ <= allowed * codes.numel() and steps <= 1


def check_fp8(where) -> bool:
    """FP8 rows (lamp::fp8_rows, lamp::geglu_fp8) at the prefix MLP's shapes: the same scales
    as the float32 reference and the same codes (fp8_rows bit for bit: the GPU's cast rounds to
    nearest even, as the reference's Veltkamp split does; the GeGLU's codes may differ by one
    step where the kernel's gelu and torch's differ in the last float32 bit across a rounding
    boundary: a few in 16M on the H200), then an Fp8Linear on torch._scaled_mm against its
    float32 reference path."""
    from lamp_ros.kernels.linears import Fp8Linear
    torch.manual_seed(0)
    dt, dev = where.dtype, where.device
    rows, width, mlp = where.shapes['fp8']
    ok = True
    x = torch.randn(1, rows, width, dtype=dt, device=dev)
    gate, up = torch.randn(1, rows, 2 * mlp, dtype=dt, device=dev).split(mlp, -1)
    for name, fast, reference, args, allowed in (
            (f'fp8_rows {rows}x{width}', triton_kernels.fp8_rows, ops.fp8_rows_reference, (x,),
             0),
            (f'geglu_fp8 {rows}x{mlp}', triton_kernels.fp8_rows, ops.geglu_fp8_reference,
             (gate, up), 1e-5),
            (f'rms_norm_fp8 {rows}x{width}', lambda v: triton_kernels.fp8_rows(v, eps=1e-6),
             lambda v: ops.rms_norm_fp8_reference(v, 1e-6), (x,), 1e-5)):
        (codes, scale), (want_codes, want_scale) = fast(*args), reference(*args)
        differ, steps, fine = fp8_codes_agree(where, codes, want_codes, allowed)
        same_scale = bool(torch.equal(scale, want_scale))
        t_fast = where.time_ms(lambda: fast(*args))
        t_ref = where.time_ms(lambda: reference(*args))
        status = 'ok' if same_scale and fine else 'MISMATCH'
        print(f'{name:34s} codes differing {differ} (at most {steps:g} step), scales equal '
              f'{same_scale} ({status}); '
              f'kernel {us(t_fast)} us, eager chain {us(t_ref)} us', flush=True)
        ok &= status == 'ok'
    # the prefix's attention output added to x in the kernel that makes the MLP's FP8 rows
    r = torch.randn(1, rows, width, dtype=dt, device=dev)
    (total, codes, scale) = triton_kernels.fp8_rows(x, eps=1e-6, residual=r)
    want_total, want_codes, want_scale = ops.add_rms_norm_fp8_reference(x, r, 1e-6)
    differ, _, codes_fine = fp8_codes_agree(where, codes, want_codes, 1e-5)
    fine = torch.equal(total, want_total) and torch.equal(scale, want_scale) and codes_fine
    t_fast = where.time_ms(lambda: triton_kernels.fp8_rows(x, eps=1e-6, residual=r))
    t_two = where.time_ms(lambda: triton_kernels.fp8_rows(x + r, eps=1e-6))
    print(f'{f"add_rms_norm_fp8 {rows}x{width}":34s} sums equal '
          f'{torch.equal(total, want_total)}, codes differing {differ}, scales equal '
          f'{torch.equal(scale, want_scale)} ({"ok" if fine else "MISMATCH"}); kernel '
          f'{us(t_fast)} us, add then rms_norm_fp8 {us(t_two)} us', flush=True)
    ok &= fine
    if where.skip('fp8 linear (torch._scaled_mm, cuBLASLt\'s FP8 GEMM)'):
        return ok
    for n, k, fast in ((32768, 2048, False), (32768, 2048, True), (2048, 16384, False)):
        linear = torch.nn.Linear(k, n, bias=False, device=dev, dtype=dt)
        fp8 = Fp8Linear.from_linear(linear, fast_accumulation=fast)
        a = torch.randn(1, 968, k, dtype=dt, device=dev)
        want = fp8(a).float()
        fp8.use_kernel()
        got = fp8(a).float()
        err = float((got - want).abs().max() / want.abs().max())
        t_fp8 = where.time_ms(lambda: fp8(a))
        t_bf16 = where.time_ms(lambda: linear(a))
        status = 'ok' if err <= 1e-2 else 'MISMATCH'
        mode = 'fast sums' if fast else 'fp32 sums'
        print(f'fp8 linear 968x{n}x{k} {mode:13s} err {err:.2g} of max |ref| ({status}); '
              f'quantise + _scaled_mm {us(t_fp8)} us, bf16 linear {us(t_bf16)} '
              f'us', flush=True)
        ok &= status == 'ok'
    return ok


def check_gelu_epilogue(where) -> bool:
    """The vision fc1's GELU in the cuBLASLt epilogue (VisionBlock.hidden on the kernel path):
    the tanh GELU the encoder was trained with, not the erf one (told apart in float32, where
    they differ by up to 5e-4 and the GEMMs by far less), then in bf16 against float32."""
    from lamp_ros.policies.pi05.staged.layers import VisionBlock
    if where.skip('vision fc1 GELU epilogue (cuBLASLt\'s; the CPU runs the plain form)'):
        return True
    torch.manual_seed(0)
    dev = 'cuda'
    block = VisionBlock(16, None, None, None, None, torch.nn.Linear(1152, 4304, device=dev),
                        None)
    block.kernel = True
    h = torch.randn(768, 1152, device=dev)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 GEMMs in float32 (the default)
    with torch.no_grad():
        got = block.hidden(h)
        linear = block.fc1(h)
        to_tanh = float((got - F.gelu(linear, approximate='tanh')).abs().max())
        to_erf = float((got - F.gelu(linear)).abs().max())
        block.to(torch.bfloat16)
        got16 = block.hidden(h.bfloat16()).float()
        err16 = float((got16 - F.gelu(linear, approximate='tanh')).abs().max())
    torch.backends.cuda.matmul.allow_tf32 = tf32
    ok = to_tanh < to_erf / 10 and err16 < 0.05
    print(f'vision fc1 GELU epilogue 768x4304   float32: {to_tanh:.2g} from tanh GELU, '
          f'{to_erf:.2g} from erf; bf16: {err16:.2g} ({"ok" if ok else "MISMATCH"})',
          flush=True)
    return ok


def check_expert_layer(where, rows=50, width=1024, heads=8, d=256, mlp=4096, prefix=968) -> bool:
    """pi05_full's expert layer: tune, check against the float32 reference, sum the times. In
    the smoke: the first candidate of each part (tuning's choice off the GPU), untimed."""
    torch.manual_seed(0)
    dt, dev = where.dtype, where.device

    def weight(n, k):
        return (torch.randn(n, k, device=dev) / k ** 0.5).to(dt)

    x = torch.randn(1, rows, width, dtype=dt, device=dev)
    w_qkv, w_o = weight((heads + 2) * d, width), weight(width, heads * d)
    w_gate, w_up, w_down = weight(mlp, width), weight(mlp, width), weight(width, mlp)
    mod = 1 + torch.randn(width, device=dev) / 10
    gate = (torch.randn(width, device=dev) / 10).to(dt)
    b_qkv, b_gate, b_up = (torch.randn(n, device=dev) / 10 for n in ((heads + 2) * d, mlp, mlp))
    qkv = torch.randn(1, rows, (heads + 2) * d, dtype=dt, device=dev)
    k_prefix, v_prefix = torch.randn(2, 1, prefix, 1, d, dtype=dt, device=dev)
    angle = torch.randn(1, rows, d // 2, device=dev)
    mask = torch.rand(1, rows, prefix + rows, device=dev) > 0.1
    a = torch.randn(1, rows, heads * d, dtype=dt, device=dev)
    h = torch.randn(1, rows, mlp, dtype=dt, device=dev)
    counters = torch.zeros(1024, dtype=torch.int32, device=dev)
    cases = {
        'qkv': (ops.ada_linear, (x, w_qkv, mod, b_qkv, 1e-6), ops.ada_linear_reference,
                tuning.gemm_candidates(rows, (heads + 2) * d, width)),
        'attention': (ops.mqa_attention, (qkv, k_prefix, v_prefix, angle.cos(), angle.sin(),
                                          mask, heads, d ** -0.5),
                      ops.mqa_attention_reference, tuning.attention_candidates(d)),
        'o': (ops.gated_linear, (a, w_o, x, gate), ops.gated_linear_reference,
              tuning.gemm_candidates(rows, width, heads * d)),
        'gate_up': (ops.ada_geglu, (x, w_gate, w_up, mod, b_gate, b_up, 1e-6),
                    ops.ada_geglu_reference, tuning.gemm_candidates(rows, mlp, width)),
        'down': (ops.gated_linear, (h, w_down, x, gate), ops.gated_linear_reference,
                 tuning.gemm_candidates(rows, width, mlp)),
    }
    # the pair the build may take instead of a premade qkv and the attention above: q and k
    # rotated in the GEMM's epilogue, q in log2 units (not in the five parts' sum)
    xm, pieces = ops.norm_pieces(x, mod, 32)
    q_scale = d ** -0.5 * ops.LOG2E
    cases['qkv_rope'] = (ops.premade_linear_rope, (xm, pieces, w_qkv, b_qkv, angle.cos(),
                                                   angle.sin(), heads, q_scale, 1e-6),
                         ops.premade_linear_rope_reference,
                         tuning.rope_premade_candidates(rows, (heads + 2) * d, width, d,
                                                        dt.itemsize))
    cases['attention_rotated'] = (ops.mqa_attention_rotated,
                                  (qkv, k_prefix, v_prefix, mask, heads, 1 / ops.LOG2E),
                                  ops.mqa_attention_rotated_reference,
                                  tuning.attention_candidates(d, rotated=True))
    ok, total = True, 0.0
    for role, (op, args, reference, candidates) in cases.items():
        op = where.kernel(op)
        extra = (counters,) if role in ('qkv', 'o', 'gate_up', 'down') else ()
        choice = tuning.pick(candidates, lambda t: op(*args, t, *extra), on_gpu=not where.smoke)
        if where.smoke:  # untimed: the first candidate alone
            print(f'expert {role}: not timed (n/a), first of {len(candidates)} candidates',
                  flush=True)
            best, tried = None, [choice.tiles]
        else:
            times = [f'{k} {v if isinstance(v, str) else f"{v * 1e3:.1f}"}'
                     for k, v in choice.timings.items()]
            print(f'expert {role}: ' + ', '.join(times), flush=True)
            best = min(v for v in choice.timings.values() if isinstance(v, float))
            total += best if role in PARTS else 0.0
            tried = [t for t in candidates if isinstance(choice.timings.get(str(t)), float)]
        want = reference(*args).float()
        worst = 0.0  # every tiling that ran, split-K ones twice (their counters must reset)
        for tiles in tried:
            for _ in range(2):
                got = op(*args, tiles, *extra).float()
                worst = max(worst, float((got - want).abs().max() / want.abs().max()))
        leftover = int(counters.abs().sum())
        status = 'ok' if worst <= 2e-2 and not leftover else 'MISMATCH'
        print(f'expert {role:9s} tiles {choice.tiles}: {us(best, 6)} us; worst error of '
              f'any tiling {worst:.2g} of max |ref|; counters left {leftover} ({status})',
              flush=True)
        ok &= status == 'ok'
    if not where.smoke:
        print(f'expert layer, five kernels: {total * 1e3:.1f} us; x 180 layer-steps = '
              f'{total * 180:.2f} ms', flush=True)
    return ok


def check_lt_linear(where) -> bool:
    """`lamp::lt_linear` (LtLinear) on every algorithm cuBLASLt offers for the prefix's o at the
    64-token graph's 832 rows and the vision's out_proj form (768 rows, bias, weight (in, out)):
    each computes torch's product and is timed from a CUDA graph against torch's op; a table
    measured with another cuBLASLt version, or without these rows, runs torch's op bit for bit;
    and the runner's `algorithm_status` says which."""
    from lamp_ros.backends.cuda.run_side import algorithm_status
    from lamp_ros.kernels.linears import KNLinear, LtLinear
    from lamp_ros.kernels import cublaslt
    if where.skip('lt_linear (cuBLASLt\'s algorithms)'):
        return True
    here = cublaslt.identity()
    elsewhere = {'cublaslt': here['cublaslt'] + 1, 'gpu': here['gpu']}
    print(f'cuBLASLt {here["cublaslt"]} on {here["gpu"]}', flush=True)
    ok = True
    for m, k, n, bias, kn in ((832, 2048, 2048, False, False), (768, 1152, 1152, True, True)):
        torch.manual_seed(0)
        lin = torch.nn.Linear(k, n, bias=bias).to('cuda', torch.bfloat16)
        layer = KNLinear(lin) if kn else lin
        x = torch.randn(m, k, device='cuda', dtype=torch.bfloat16)
        name = f'lt_linear {m}x{k}->{n}' + (' +bias (in, out)' if kn else '')
        with torch.no_grad():
            want = layer(x)
            t_torch = tuning.gpu_time_ms(lambda: layer(x))
            spec = cublaslt.GemmSpec(m, n, k, 'bias' if bias else 'none', weight_kn=kn)
            plan = cublaslt.plan_for(spec)
            algos = plan.algorithms(8)
            for i, algo in enumerate(algos):
                lt = LtLinear(layer, {m: algo}, here)
                err = tuning.disagreement(lt(x), want)
                t = tuning.gpu_time_ms(lambda: lt(x))
                fine = err <= 1e-2 and plan.supports(algo)  # else it ran torch's op
                print(f'{name} algorithm {i}: max rel err {err:.3g} '
                      f'({"ok" if fine else "MISMATCH or refused"}); {t * 1e3:6.2f} us, '
                      f'torch\'s op {t_torch * 1e3:6.2f} us, workspace {algo.workspace} B',
                      flush=True)
                ok &= fine
            foreign = LtLinear(layer, {m: algos[-1]}, elsewhere)
            other_rows = LtLinear(layer, {m + 64: algos[-1]}, here)
            same = torch.equal(foreign(x), want) and torch.equal(other_rows(x), want)
            print(f'{name}: another cuBLASLt or other rows run torch\'s op bit for bit: {same}',
                  flush=True)
            ok &= same
    stored = algorithm_status({**here, 'linears': 3}, 'cuda')
    unused = algorithm_status({**elsewhere, 'linears': 3}, 'cuda')
    print(f'algorithm_status: {stored!r}; {unused!r}', flush=True)
    return ok & (stored == 'stored: 3 linears') & unused.startswith('not used')


def check_letterbox(where) -> bool:
    """`lamp::letterbox` (the device letterbox, compiler/device_letterbox.py): the Triton kernel
    makes OpenCV's INTER_LINEAR_EXACT resize-with-pad byte for byte (frames of many sizes,
    stale bytes past them, an absent camera), and its time for pi05_full's cameras (640x480 +
    two 224x224, from CUDA-graph replays) beside the host's OpenCV letterbox of the same frames
    (CPU wall time, one thread: what the host no longer does)."""
    import time

    import cv2
    import numpy as np

    from lamp_ros.ops.image import resize_with_pad
    from lamp_ros.ops.letterbox import letterbox_frames
    rng = np.random.default_rng(0)
    size, letterbox = where.shapes['letterbox'], where.kernel(ops.letterbox)
    ok = True
    cases = [((480, 640), (224, 224), (224, 224)), ((720, 1280), (100, 300), (1, 1)),
             ((1080, 1920), (224, 225), None), ((57, 999), (640, 480), (3, 5))]
    if where.smoke:  # the interpreter runs a program per output row: pi05's cameras, and a
        cases = cases[::2]  # 1080p frame beside an absent camera
    for sizes in cases:
        slots = ('a', 'b', 'c')
        images = {s: rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
                  for s, hw in zip(slots, sizes) if hw is not None}
        capacity = {s: max(hw[0] * hw[1], size * size) * 3 if hw else size * size * 3
                    for s, hw in zip(slots, sizes)}
        *frames, geometry, _ = letterbox_frames(images, slots, size, capacity)
        buffers = []
        for slot, frame in zip(slots, frames):
            buffer = torch.from_numpy(rng.integers(0, 256, capacity[slot], dtype=np.uint8))
            if frame is not None:
                buffer[:frame.size] = torch.from_numpy(frame)
            buffers.append(buffer.to(where.device))
        geometry = torch.from_numpy(geometry).to(where.device)
        got = letterbox(buffers, geometry).cpu().numpy()
        want = [resize_with_pad(images[s], size, size, 'linear_exact') if s in images
                else np.zeros((size, size, 3), np.uint8) for s in slots]
        same = all(np.array_equal(got[0, i], w) for i, w in enumerate(want))
        named = ('x'.join(map(str, hw)) if hw else 'absent' for hw in sizes)
        line = f'letterbox {" + ".join(named)}'
        if sizes == cases[0] and not where.smoke:
            t_gpu = tuning.gpu_time_ms(lambda: ops.letterbox(buffers, geometry))
            cv2.setNumThreads(1)
            start = time.perf_counter()
            for _ in range(50):
                for s in slots:
                    resize_with_pad(images[s], size, size, 'linear_exact')
            t_host = (time.perf_counter() - start) / 50
            line += (f'; kernels {t_gpu * 1e3:6.1f} us (3 launches), the host\'s OpenCV '
                     f'letterbox {t_host * 1e6:6.1f} us')
        print(f'{line}: equal to OpenCV {same} ({"ok" if same else "MISMATCH"})', flush=True)
        ok &= same
    return ok


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('group', nargs='?', choices=('fp8', 'norms', 'lt_linear', 'letterbox'),
                        help='that group alone (fp8: the FP8 kernels and the GELU epilogue)')
    parser.add_argument('--smoke', action='store_true',
                        help="Triton's interpreter on the CPU at small shapes, untimed")
    args = parser.parse_args()
    where = Where(args.smoke)
    if where.smoke:
        print("smoke: Triton's interpreter on the CPU, small shapes in float32, no timings",
              flush=True)
    if args.group == 'fp8':  # the FP8 kernels alone, and the GELU epilogue
        raise SystemExit(0 if check_fp8(where) & check_gelu_epilogue(where) else 1)
    if args.group == 'norms':  # the norms alone
        raise SystemExit(0 if check_norms(where) else 1)
    if args.group == 'lt_linear':  # the stored cuBLASLt algorithms alone
        raise SystemExit(0 if check_lt_linear(where) else 1)
    if args.group == 'letterbox':  # the device letterbox alone
        raise SystemExit(0 if check_letterbox(where) else 1)
    main(where)
