"""The `lamp::` kernels on the GPU: match their reference at the policy's shapes, and time them
against the eager op chains they replace (GPU time of CUDA-graph replays, as the artifact runs).
The expert's five-kernel layer (triton_expert_gemm.py, triton_attention.py) is tuned here as
the lowering tunes it, every candidate's time printed, and checked in bf16 with the chosen
tiles.

Usage: python3 scripts/device/kernels_check.py [fp8 | norms | lt_linear | letterbox]   (one
line per kernel and shape; a name checks that group alone)
"""

import torch
from torch.nn import functional as F

from lamp_ros.policies.pi05.staged.expert_kernels import PARTS
from lamp_ros.kernels import operators as ops, triton_kernels, tuning


def check(name, fast, reference, args, atol):
    got, want = fast(*args), reference(*args)
    err = float((got.float() - want.float()).abs().max())
    t_fast = tuning.gpu_time_ms(lambda: fast(*args))
    t_ref = tuning.gpu_time_ms(lambda: reference(*args))
    status = 'ok' if err <= atol else 'MISMATCH'
    print(f'{name:34s} max abs err {err:.3g} ({status}); kernel {t_fast * 1e3:7.1f} us, '
          f'eager chain {t_ref * 1e3:7.1f} us, x{t_ref / t_fast:5.1f}', flush=True)
    return err <= atol


def main() -> None:
    torch.manual_seed(0)
    bf16, dev = torch.bfloat16, 'cuda'
    ok = True
    for rows, width in ((968, 2048), (50, 1024)):
        x = torch.randn(1, rows, width, dtype=bf16, device=dev)
        s, b = (torch.randn(width, dtype=bf16, device=dev) * 0.1 for _ in range(2))
        ok &= check(f'rms_norm {rows}x{width}', triton_kernels.rms_norm, ops.rms_norm_reference,
                    (x, None, None, 1e-6), 0.07)
        ok &= check(f'ada_rms_norm {rows}x{width}', triton_kernels.rms_norm,
                    ops.rms_norm_reference, (x, s, b, 1e-6), 0.07)
    for n, heads, width in ((968, 8, 2560), (50, 8, 2560)):
        qkv = torch.randn(1, n, width, dtype=bf16, device=dev)
        q = qkv[..., :heads * 256].reshape(1, n, heads, 256)
        pos = torch.arange(n, device=dev)[None]
        freq = 10000.0 ** (-torch.arange(128, device=dev, dtype=torch.float32) / 128)
        angle = pos.float()[..., None] * freq
        ok &= check(f'rope {n}x{heads}x256', triton_kernels.rope, ops.rope_reference,
                    (q, angle.cos(), angle.sin()), 0.07)
        k = qkv[..., heads * 256:(heads + 1) * 256].reshape(1, n, 1, 256)
        c, s_ = angle.cos(), angle.sin()
        pair = lambda: triton_kernels.rope(q, c, s_, k)  # noqa: E731
        apart = lambda: (triton_kernels.rope(q, c, s_), triton_kernels.rope(k, c, s_))  # noqa
        same = all(torch.equal(a, b) for a, b in zip(pair(), apart()))
        t_pair, t_apart = tuning.gpu_time_ms(pair), tuning.gpu_time_ms(apart)
        print(f'rope_qk {n}x({heads}+1)x256{"":13s} equal to two launches {same} '
              f'({"ok" if same else "MISMATCH"}); kernel {t_pair * 1e3:7.1f} us, two launches '
              f'{t_apart * 1e3:7.1f} us, x{t_apart / t_pair:5.1f}', flush=True)
        ok &= same
    for n, m in ((968, 16384), (50, 4096)):
        gate, up = torch.randn(1, n, 2 * m, dtype=bf16, device=dev).split(m, -1)
        ok &= check(f'geglu {n}x{m}', triton_kernels.geglu, ops.geglu_reference, (gate, up), 0.3)
    for n, m in ((968, 968), (50, 1018)):  # prefix and expert attention, 8 heads as rows
        scores = torch.randn(1, n * 8, m, dtype=bf16, device=dev) * 8
        mask = torch.rand(1, n, m, device=dev) > 0.1
        ok &= check(f'masked_softmax {n}x8x{m}', triton_kernels.masked_softmax,
                    ops.masked_softmax_reference, (scores, mask, 8, 1 / 16), 0.01)
    ok &= check_norms()
    ok &= check_fp8()
    ok &= check_gelu_epilogue()
    ok &= check_expert_layer()
    ok &= check_lt_linear()
    ok &= check_letterbox()
    print('all kernels match' if ok else 'SOME KERNELS DO NOT MATCH')
    raise SystemExit(0 if ok else 1)


def check_norms() -> bool:
    """lamp::layer_norm and lamp::add_norm at the shapes that run them (the vision's 768 x 1152
    LayerNorms, the prefix's 968 x 2048 RMSNorm after its FP8 down projection): the sum bit for
    bit as eager torch's add, the norm against float32, and the time against what they replace
    (torch's LayerNorm kernel; an add kernel, then the norm kernel)."""
    torch.manual_seed(0)
    bf16, dev, ok = torch.bfloat16, 'cuda', True
    for rows, width, center in ((768, 1152, True), (968, 2048, False)):
        x, r = (torch.randn(1, rows, width, dtype=bf16, device=dev) * 4 for _ in range(2))
        kind = 'layer' if center else 'rms'
        if center:
            ok &= check(f'layer_norm {rows}x{width}', ops.layer_norm,
                        lambda v, eps: F.layer_norm(v, (width,), eps=eps), (x, 1e-6), 0.07)
            separate = lambda: F.layer_norm(x + r, (width,), eps=1e-6)  # noqa: E731
        else:
            separate = lambda: triton_kernels.rms_norm(x + r, None, None, 1e-6)  # noqa: E731
        total, normed = triton_kernels.norm(x, 1e-6, r, center)
        want_total, want = ops.add_norm_reference(x.float(), r.float(), 1e-6, center)
        same_sum = bool(torch.equal(total, x + r))
        err = float((normed.float() - want).abs().max())
        t_fused = tuning.gpu_time_ms(lambda: triton_kernels.norm(x, 1e-6, r, center))
        t_separate = tuning.gpu_time_ms(separate)
        status = 'ok' if same_sum and err <= 0.07 else 'MISMATCH'
        print(f'add_norm ({kind}) {rows}x{width:<14d} sum equal to eager {same_sum}, norm max '
              f'abs err {err:.3g} ({status}); kernel {t_fused * 1e3:7.1f} us, add + norm '
              f'{t_separate * 1e3:7.1f} us, x{t_separate / t_fused:5.1f}', flush=True)
        ok &= status == 'ok'
    return ok


def check_fp8() -> bool:
    """FP8 rows (lamp::fp8_rows, lamp::geglu_fp8) at the prefix MLP's shapes: the same scales
    as the float32 reference and the same codes (fp8_rows bit for bit: the GPU's cast rounds to
    nearest even, as the reference's Veltkamp split does; the GeGLU's codes may differ by one
    step where the kernel's gelu and torch's differ in the last float32 bit across a rounding
    boundary: a few in 16M on the H200), then an Fp8Linear on torch._scaled_mm against its
    float32 reference path."""
    from lamp_ros.kernels.linears import Fp8Linear
    torch.manual_seed(0)
    bf16, dev = torch.bfloat16, 'cuda'
    ok = True
    x = torch.randn(1, 968, 2048, dtype=bf16, device=dev)
    gate, up = torch.randn(1, 968, 2 * 16384, dtype=bf16, device=dev).split(16384, -1)
    for name, fast, reference, args, allowed in (
            ('fp8_rows 968x2048', triton_kernels.fp8_rows, ops.fp8_rows_reference, (x,), 0),
            ('geglu_fp8 968x16384', triton_kernels.fp8_rows, ops.geglu_fp8_reference,
             (gate, up), 1e-5),
            ('rms_norm_fp8 968x2048', lambda v: triton_kernels.fp8_rows(v, eps=1e-6),
             lambda v: ops.rms_norm_fp8_reference(v, 1e-6), (x,), 1e-5)):
        (codes, scale), (want_codes, want_scale) = fast(*args), reference(*args)
        differ = int((codes.float() != want_codes).sum())
        steps = float(ops.e4m3_steps(codes.float(), want_codes).max())
        same_scale = bool(torch.equal(scale, want_scale))
        t_fast = tuning.gpu_time_ms(lambda: fast(*args))
        t_ref = tuning.gpu_time_ms(lambda: reference(*args))
        fine = differ <= allowed * codes.numel() and steps <= 1
        status = 'ok' if same_scale and fine else 'MISMATCH'
        print(f'{name:34s} codes differing {differ} (at most {steps:g} step), scales equal '
              f'{same_scale} ({status}); '
              f'kernel {t_fast * 1e3:7.1f} us, eager chain {t_ref * 1e3:7.1f} us', flush=True)
        ok &= status == 'ok'
    # the prefix's attention output added to x in the kernel that makes the MLP's FP8 rows
    r = torch.randn(1, 968, 2048, dtype=bf16, device=dev)
    (total, codes, scale) = triton_kernels.fp8_rows(x, eps=1e-6, residual=r)
    want_total, want_codes, want_scale = ops.add_rms_norm_fp8_reference(x, r, 1e-6)
    differ = int((codes.float() != want_codes).sum())
    fine = (torch.equal(total, want_total) and torch.equal(scale, want_scale)
            and differ <= 1e-5 * codes.numel()
            and float(ops.e4m3_steps(codes.float(), want_codes).max()) <= 1)
    t_fast = tuning.gpu_time_ms(lambda: triton_kernels.fp8_rows(x, eps=1e-6, residual=r))
    t_two = tuning.gpu_time_ms(lambda: triton_kernels.fp8_rows(x + r, eps=1e-6))
    print(f'{"add_rms_norm_fp8 968x2048":34s} sums equal {torch.equal(total, want_total)}, '
          f'codes differing {differ}, scales equal {torch.equal(scale, want_scale)} '
          f'({"ok" if fine else "MISMATCH"}); kernel {t_fast * 1e3:7.1f} us, add then '
          f'rms_norm_fp8 {t_two * 1e3:7.1f} us', flush=True)
    ok &= fine
    for n, k, fast in ((32768, 2048, False), (32768, 2048, True), (2048, 16384, False)):
        linear = torch.nn.Linear(k, n, bias=False, device=dev, dtype=bf16)
        fp8 = Fp8Linear.from_linear(linear, fast_accumulation=fast)
        a = torch.randn(1, 968, k, dtype=bf16, device=dev)
        want = fp8(a).float()
        fp8.use_kernel()
        got = fp8(a).float()
        err = float((got - want).abs().max() / want.abs().max())
        t_fp8 = tuning.gpu_time_ms(lambda: fp8(a))
        t_bf16 = tuning.gpu_time_ms(lambda: linear(a))
        status = 'ok' if err <= 1e-2 else 'MISMATCH'
        mode = 'fast sums' if fast else 'fp32 sums'
        print(f'fp8 linear 968x{n}x{k} {mode:13s} err {err:.2g} of max |ref| ({status}); '
              f'quantise + _scaled_mm {t_fp8 * 1e3:7.1f} us, bf16 linear {t_bf16 * 1e3:7.1f} '
              f'us', flush=True)
        ok &= status == 'ok'
    return ok


def check_gelu_epilogue() -> bool:
    """The vision fc1's GELU in the cuBLASLt epilogue (VisionBlock.hidden on the kernel path):
    the tanh GELU the encoder was trained with, not the erf one (told apart in float32, where
    they differ by up to 5e-4 and the GEMMs by far less), then in bf16 against float32."""
    from lamp_ros.policies.pi05.staged.layers import VisionBlock
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


def check_expert_layer(rows=50, width=1024, heads=8, d=256, mlp=4096, prefix=968) -> bool:
    """pi05_full's expert layer: tune, check against the float32 reference, sum the times."""
    torch.manual_seed(0)
    bf16, dev = torch.bfloat16, 'cuda'

    def weight(n, k):
        return (torch.randn(n, k, device=dev) / k ** 0.5).to(bf16)

    x = torch.randn(1, rows, width, dtype=bf16, device=dev)
    w_qkv, w_o = weight((heads + 2) * d, width), weight(width, heads * d)
    w_gate, w_up, w_down = weight(mlp, width), weight(mlp, width), weight(width, mlp)
    mod = 1 + torch.randn(width, device=dev) / 10
    gate = (torch.randn(width, device=dev) / 10).to(bf16)
    b_qkv, b_gate, b_up = (torch.randn(n, device=dev) / 10 for n in ((heads + 2) * d, mlp, mlp))
    qkv = torch.randn(1, rows, (heads + 2) * d, dtype=bf16, device=dev)
    k_prefix, v_prefix = torch.randn(2, 1, prefix, 1, d, dtype=bf16, device=dev)
    angle = torch.randn(1, rows, d // 2, device=dev)
    mask = torch.rand(1, rows, prefix + rows, device=dev) > 0.1
    a = torch.randn(1, rows, heads * d, dtype=bf16, device=dev)
    h = torch.randn(1, rows, mlp, dtype=bf16, device=dev)
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
                         tuning.rope_premade_candidates(rows, (heads + 2) * d, width, d, 2))
    cases['attention_rotated'] = (ops.mqa_attention_rotated,
                                  (qkv, k_prefix, v_prefix, mask, heads, 1 / ops.LOG2E),
                                  ops.mqa_attention_rotated_reference,
                                  tuning.attention_candidates(d, rotated=True))
    ok, total = True, 0.0
    for role, (op, args, reference, candidates) in cases.items():
        extra = (counters,) if role in ('qkv', 'o', 'gate_up', 'down') else ()
        choice = tuning.pick(candidates, lambda t: op(*args, t, *extra), on_gpu=True)
        times = [f'{k} {v if isinstance(v, str) else f"{v * 1e3:.1f}"}'
                 for k, v in choice.timings.items()]
        print(f'expert {role}: ' + ', '.join(times))
        best = min(v for v in choice.timings.values() if isinstance(v, float))
        total += best if role in PARTS else 0.0
        want = reference(*args).float()
        worst = 0.0  # every tiling that ran, split-K ones twice (their counters must reset)
        for tiles in candidates:
            if isinstance(choice.timings.get(str(tiles)), float):
                for _ in range(2):
                    got = op(*args, tiles, *extra).float()
                    worst = max(worst, float((got - want).abs().max() / want.abs().max()))
        leftover = int(counters.abs().sum())
        status = 'ok' if worst <= 2e-2 and not leftover else 'MISMATCH'
        print(f'expert {role:9s} tiles {choice.tiles}: {best * 1e3:6.1f} us; worst error of '
              f'any tiling {worst:.2g} of max |ref|; counters left {leftover} ({status})',
              flush=True)
        ok &= status == 'ok'
    print(f'expert layer, five kernels: {total * 1e3:.1f} us; x 180 layer-steps = '
          f'{total * 180:.2f} ms', flush=True)
    return ok


def check_lt_linear() -> bool:
    """`lamp::lt_linear` (LtLinear) on every algorithm cuBLASLt offers for the prefix's o at the
    64-token graph's 832 rows and the vision's out_proj form (768 rows, bias, weight (in, out)):
    each computes torch's product and is timed from a CUDA graph against torch's op; a table
    measured with another cuBLASLt version, or without these rows, runs torch's op bit for bit;
    and the runner's `algorithm_status` says which."""
    from lamp_ros.backends.cuda.run_side import algorithm_status
    from lamp_ros.kernels.linears import KNLinear, LtLinear
    from lamp_ros.kernels import cublaslt
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


def check_letterbox() -> bool:
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
    ok = True
    cases = [((480, 640), (224, 224), (224, 224)), ((720, 1280), (100, 300), (1, 1)),
             ((1080, 1920), (224, 225), None), ((57, 999), (640, 480), (3, 5))]
    for sizes in cases:
        slots = ('a', 'b', 'c')
        images = {s: rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
                  for s, hw in zip(slots, sizes) if hw is not None}
        capacity = {s: max(hw[0] * hw[1], 224 * 224) * 3 if hw else 224 * 224 * 3
                    for s, hw in zip(slots, sizes)}
        *frames, geometry, _ = letterbox_frames(images, slots, 224, capacity)
        buffers = []
        for slot, frame in zip(slots, frames):
            buffer = torch.from_numpy(rng.integers(0, 256, capacity[slot], dtype=np.uint8))
            if frame is not None:
                buffer[:frame.size] = torch.from_numpy(frame)
            buffers.append(buffer.cuda())
        geometry = torch.from_numpy(geometry).cuda()
        got = ops.letterbox(buffers, geometry).cpu().numpy()
        want = [resize_with_pad(images[s], 224, 224, 'linear_exact') if s in images
                else np.zeros((224, 224, 3), np.uint8) for s in slots]
        same = all(np.array_equal(got[0, i], w) for i, w in enumerate(want))
        named = ('x'.join(map(str, hw)) if hw else 'absent' for hw in sizes)
        line = f'letterbox {" + ".join(named)}'
        if sizes == cases[0]:
            t_gpu = tuning.gpu_time_ms(lambda: ops.letterbox(buffers, geometry))
            cv2.setNumThreads(1)
            start = time.perf_counter()
            for _ in range(50):
                for s in slots:
                    resize_with_pad(images[s], 224, 224, 'linear_exact')
            t_host = (time.perf_counter() - start) / 50
            line += (f'; kernels {t_gpu * 1e3:6.1f} us (3 launches), the host\'s OpenCV '
                     f'letterbox {t_host * 1e6:6.1f} us')
        print(f'{line}: equal to OpenCV {same} ({"ok" if same else "MISMATCH"})', flush=True)
        ok &= same
    return ok


if __name__ == '__main__':
    import sys
    if sys.argv[1:] == ['fp8']:  # the FP8 kernels alone, and the GELU epilogue
        raise SystemExit(0 if check_fp8() & check_gelu_epilogue() else 1)
    if sys.argv[1:] == ['norms']:  # the norms alone
        raise SystemExit(0 if check_norms() else 1)
    if sys.argv[1:] == ['lt_linear']:  # the stored cuBLASLt algorithms alone
        raise SystemExit(0 if check_lt_linear() else 1)
    if sys.argv[1:] == ['letterbox']:  # the device letterbox alone
        raise SystemExit(0 if check_letterbox() else 1)
    main()
