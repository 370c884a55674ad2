"""The Triton kernels against the operators' reference code, in Triton's interpreter on the CPU.

Triton 3.6.0 (the GPU machine's version) is pinned in requirements.txt, so CI runs the kernels
here on CPU tensors, element by element as the GPU would: wrong numbers fail here, not in a
device call. scripts/device/kernels_check.py runs the same comparison on the GPU, and times it."""

import os

import pytest
import torch

os.environ.setdefault('TRITON_INTERPRET', '1')  # before the kernels are decorated
from lamp_ros.kernels import operators as ops  # noqa: E402  (after the switch)
from lamp_ros.kernels import triton_attention, triton_expert_gemm  # noqa: E402
from lamp_ros.kernels import triton_kernels  # noqa: E402
from lamp_ros.kernels import triton_premade  # noqa: E402
from lamp_ros.kernels.interpreter_shim import index_shim  # noqa: E402

index_shim()


@pytest.mark.parametrize('dtype,atol', [(torch.float32, 2e-6), (torch.bfloat16, 6.3e-2)])
def test_kernels_match_the_reference(dtype, atol):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 288, dtype=dtype)[..., :200]  # rows of a wider tensor: strided
    scale, shift = torch.randn(200), torch.randn(200)
    for mod in ((None, None), (scale, shift)):
        torch.testing.assert_close(triton_kernels.rms_norm(x, *mod, 1e-6),
                                   ops.rms_norm_reference(x, *mod, 1e-6), atol=atol, rtol=0)
    r = torch.randn(2, 5, 200, dtype=dtype) * 3
    torch.testing.assert_close(triton_kernels.norm(x + 2, 1e-6, center=True),
                               ops.layer_norm_reference(x + 2, 1e-6), atol=atol, rtol=0)
    for center in (False, True):
        got = triton_kernels.norm(x, 1e-6, r, center)
        want = ops.add_norm_reference(x, r, 1e-6, center)
        # the sum as the eager add rounds it: in float32 exactly; in bf16 the interpreter
        # truncates float32 -> bf16 casts (the GPU rounds to nearest, kernels_check.py checks
        # the sum bit for bit there), so here one bf16 step
        torch.testing.assert_close(got[0], want[0], atol=0 if dtype == torch.float32 else atol,
                                   rtol=0)
        torch.testing.assert_close(got[1], want[1], atol=atol, rtol=0)
    q = torch.randn(2, 7, 96, dtype=dtype)[..., :64].reshape(2, 7, 4, 16)  # q of a merged qkv
    cos, sin = torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    torch.testing.assert_close(triton_kernels.rope(q, cos, sin),
                               ops.rope_reference(q, cos, sin), atol=atol, rtol=0)
    k = torch.randn(2, 7, 96, dtype=dtype)[..., 64:80].reshape(2, 7, 1, 16)  # its k, beside q
    for got, want in zip(triton_kernels.rope(q, cos, sin, k),
                         (ops.rope_reference(q, cos, sin), ops.rope_reference(k, cos, sin))):
        torch.testing.assert_close(got, want, atol=atol, rtol=0)
    gate, up = torch.randn(3, 2 * 1500, dtype=dtype).split(1500, -1)
    torch.testing.assert_close(triton_kernels.geglu(gate, up), ops.geglu_reference(gate, up),
                               atol=atol * 4, rtol=0)
    scores = torch.randn(2, 5 * 4, 37, dtype=dtype) * 4  # 5 tokens x 4 heads, 37 keys
    mask = torch.rand(2, 5, 37) > 0.3
    mask[0, 2] = False  # a fully masked token (padding): uniform, as the eager code
    got = triton_kernels.masked_softmax(scores, mask, 4, 0.125)
    torch.testing.assert_close(got, ops.masked_softmax_reference(scores, mask, 4, 0.125),
                               atol=atol / 8, rtol=0)
    torch.testing.assert_close(got[0, 8:12].float(), torch.full((4, 37), 1 / 37), atol=atol / 8,
                               rtol=0)


def test_fp8_rows_match_the_reference():
    """Scales bit for bit; codes nearly so. Triton 3.7's interpreter casts to float8 its own
    way: where rounding carries into the next power of two it returns half the value, and
    subnormals may land one step off. That is the interpreter's cast, not the kernel's: on the
    GPU kernels_check.py finds 0 of 2M codes differing."""
    torch.manual_seed(0)
    x = torch.randn(5, 3000) * torch.logspace(-3, 3, 5)[:, None]
    x[2] = 0  # an all-zero row: zero codes, a finite scale
    gate, up = torch.randn(4, 2 * 1500).split(1500, -1)
    normed = x[[0, 1, 3, 4]]  # rms_norm_fp8 (float32 here; bf16 on the GPU: kernels_check.py)
    norm_fp8 = ops.rms_norm_fp8_reference(normed, 1e-6)
    residual = torch.randn(4, 3000)
    total, *added = triton_kernels.fp8_rows(normed, eps=1e-6, residual=residual)
    want_total, *want_added = ops.add_rms_norm_fp8_reference(normed, residual, 1e-6)
    assert torch.equal(total, want_total)
    for (codes, scale), (want, want_scale) in (
            (triton_kernels.fp8_rows(x), ops.fp8_rows_reference(x)),
            (triton_kernels.fp8_rows(gate, up), ops.geglu_fp8_reference(gate, up)),
            (triton_kernels.fp8_rows(normed, eps=1e-6), norm_fp8), (added, want_added)):
        assert codes.dtype == torch.float8_e4m3fn and torch.equal(scale, want_scale)
        got = codes.float()
        carried = (got * 2 == want) & (torch.frexp(want)[0].abs() == 0.5)
        assert bool((carried | (ops.e4m3_steps(got, want) <= 1)).all())
        assert float((got != want).float().mean()) < 0.05
    assert not bool(triton_kernels.fp8_rows(x)[0][2].float().any())


# The interpreter multiplies bfloat16 dot operands as raw bits, so the expert's GEMM and
# attention kernels are checked here in float32; kernels_check.py checks them in bf16 on the GPU.

@pytest.mark.parametrize('splits', [1, 2, 4])  # 4: the split sum unrolled past a pair
@pytest.mark.parametrize('swap', [0, 1])
def test_expert_gemms_match_the_reference(splits, swap):
    torch.manual_seed(0)
    x = torch.randn(1, 50, 64)
    w, w2 = torch.randn(2, 96, 64) / 8
    mod, bias, bias2, gate = 1 + torch.randn(64) / 10, torch.randn(96), torch.randn(96), \
        torch.randn(96)
    residual = torch.randn(1, 50, 96)
    counters = torch.zeros(32, dtype=torch.int32)
    tiles = [64, 32, max(16, 32 // splits), 4, 2, splits, swap]

    def gemm(*args, **kwargs):
        return triton_expert_gemm.expert_gemm(*args, counters=counters, **kwargs)

    cases = [
        (gemm(x, w, tiles, mod=mod, bias=bias, eps=1e-6),
         ops.ada_linear_reference(x, w, mod, bias, 1e-6)),
        (gemm(x, w, tiles, weight2=w2, mod=mod, bias=bias, bias2=bias2, eps=1e-6),
         ops.ada_geglu_reference(x, w, w2, mod, bias, bias2, 1e-6)),
        (gemm(x, w, tiles, residual=residual, gate=gate),
         ops.gated_linear_reference(x, w, residual, gate)),
        (gemm(x, w, [16, 16, 64 // splits, 4, 2, splits, swap], residual=residual),
         ops.gated_linear_reference(x, w, residual, None)),
    ]
    for got, want in cases:
        torch.testing.assert_close(got, want, atol=3e-5, rtol=0)
    assert not counters.any()  # the last split of every tile put its counter back to zero
    with pytest.raises(ValueError, match='not a multiple'):
        gemm(x, w, [64, 32, 48, 4, 2, 1, swap], residual=residual)
    # an eighth value is the dependent-launch mode; 0 is plain stream order (the interpreter
    # cannot run griddepcontrol, so modes 1 and 2 run on the GPU only: a cuda build's parity)
    torch.testing.assert_close(gemm(x, w, [*tiles, 0], residual=residual, gate=gate),
                               cases[2][1], atol=3e-5, rtol=0)
    # a ninth, 1, loads x and W by tensor descriptor: the same numbers bit for bit (rows past
    # the 50 are the copy engine's zero fill where pointer loads mask them)
    assert torch.equal(gemm(x, w, [*tiles, 0, 1], residual=residual, gate=gate),
                       gemm(x, w, tiles, residual=residual, gate=gate))


@pytest.mark.parametrize('swap', [0, 1])
def test_premade_gemms_match_the_reference(swap):
    """The gated GEMM's prep epilogue (x * mod_next, pieces), norm_pieces, and the premade
    GEMMs on them against the normed GEMMs' references of the same x."""
    torch.manual_seed(0)
    a = torch.randn(1, 50, 64)
    w, w2 = torch.randn(2, 64, 64) / 8
    wo = torch.randn(64, 64) / 8
    mod, bias, bias2, gate = 1 + torch.randn(64) / 10, torch.randn(64), torch.randn(64), \
        torch.randn(64)
    residual = torch.randn(1, 50, 64)
    counters = torch.zeros(32, dtype=torch.int32)
    x, xm, pieces = triton_expert_gemm.expert_gemm(a, wo, [64, 16, 32, 4, 2, 2, swap],
                                                   counters=counters, residual=residual,
                                                   gate=gate, mod_next=mod)
    want = ops.gated_linear_prep(a, wo, residual, gate, mod, [64, 16, 32, 4, 2, 2, swap],
                                 counters)
    for got, ref in zip((x, xm, pieces), want):
        torch.testing.assert_close(got, ref, atol=3e-5, rtol=1e-6)
    assert pieces.shape == (4, 50)  # one piece per 16-column block
    by_descriptor = triton_expert_gemm.expert_gemm(a, wo, [64, 16, 32, 4, 2, 2, swap, 0, 1],
                                                   counters=counters, residual=residual,
                                                   gate=gate, mod_next=mod)
    assert all(torch.equal(got, ref) for got, ref in zip(by_descriptor, (x, xm, pieces)))
    xm2, pieces2 = triton_premade.norm_pieces(x, mod, 8)
    for got, ref in zip((xm2, pieces2), ops.norm_pieces(x, mod, 8)):
        torch.testing.assert_close(got, ref, atol=3e-5, rtol=1e-6)
    tiles = [64 if swap else 32, 32, 4, 2, swap]
    torch.testing.assert_close(triton_premade.premade_gemm(xm, pieces, w, bias, 1e-6, tiles),
                               ops.ada_linear_reference(x, w, mod, bias, 1e-6), atol=3e-5,
                               rtol=0)
    torch.testing.assert_close(
        triton_premade.premade_gemm(xm2, pieces2, w, bias, 1e-6, tiles, weight2=w2,
                                    bias2=bias2),
        ops.ada_geglu_reference(x, w, w2, mod, bias, bias2, 1e-6), atol=3e-5, rtol=0)


@pytest.mark.parametrize('tiles, n', [([16, 16, 16, 4, 1], 7), ([32, 16, 32, 4, 2], 7),
                                      ([16, 16, 64, 4, 1], 7),
                                      ([16, 16, 16, 4, 1, 0], 7),  # sixth: dependent launch off
                                      ([16, 16, 16, 4, 1], 37)])  # own keys in 3 blocks
def test_expert_attention_matches_the_reference(tiles, n):
    torch.manual_seed(0)
    b, heads, d, prefix = 2, 4, 32, 37
    qkv = torch.randn(b, n, (heads + 2) * d)
    k_prefix, v_prefix = torch.randn(2, b, prefix, 1, d)
    angle = torch.randn(b, n, d // 2)
    mask = torch.rand(b, n, prefix + n) > 0.3
    mask[0, 2] = False  # a fully masked token: uniform over every key, as the eager code
    args = (qkv, k_prefix, v_prefix, angle.cos(), angle.sin(), mask, heads, d ** -0.5)
    want = ops.mqa_attention_reference(*args)
    torch.testing.assert_close(triton_attention.mqa_attention(*args, tiles), want, atol=3e-5,
                               rtol=0)
    # the same mask as a view of a buffer with wider rows (a stride padded to 16 bytes)
    padded = torch.zeros(b, n, 96, dtype=torch.bool)
    padded[:, :, :prefix + n] = mask
    got = triton_attention.mqa_attention(*args[:5], padded[:, :, :prefix + n], *args[6:], tiles)
    torch.testing.assert_close(got, want, atol=3e-5, rtol=0)


@pytest.mark.parametrize('swap', [0, 1])
def test_premade_qkv_rotates_q_and_k_in_its_epilogue(swap):
    """premade_gemm's rope epilogue (each program: the same dims of both halves of a head, as
    one box of the weight) against its reference; and the pair the expert runs with it, the
    rotated attention reading q pre-scaled in log2 units, against today's pair on the plain
    premade output: the same attention."""
    torch.manual_seed(0)
    heads, d, n, width = 2, 32, 50, 64
    x = torch.randn(1, n, width)
    w = torch.randn((heads + 2) * d, width) / 8
    mod, bias = 1 + torch.randn(width) / 10, torch.randn((heads + 2) * d)
    angle = torch.randn(1, n, d // 2)
    cos, sin = angle.cos(), angle.sin()
    xm, pieces = triton_premade.norm_pieces(x, mod, 8)
    q_scale = d ** -0.5 * triton_attention.LOG2E
    for tiles in ([32, 32, 4, 2, swap], [16, 32, 4, 2, swap]):  # 1 and 2 programs a head
        got = triton_premade.premade_gemm(xm, pieces, w, bias, 1e-6, tiles,
                                          rope=(cos, sin, heads, q_scale))
        torch.testing.assert_close(got, ops.premade_linear_rope_reference(
            xm, pieces, w, bias, cos, sin, heads, q_scale, 1e-6), atol=3e-5, rtol=0)
    with pytest.raises(ValueError, match='half'):  # 32 rows of each half: wider than d/2
        triton_premade.premade_gemm(xm, pieces, w, bias, 1e-6, [64, 32, 4, 2, swap],
                                    rope=(cos, sin, heads, q_scale))
    k_prefix, v_prefix = torch.randn(2, 1, 37, 1, d)
    mask = torch.rand(1, n, 37 + n) > 0.3
    plain = triton_premade.premade_gemm(xm, pieces, w, bias, 1e-6, [32, 32, 4, 2, swap])
    want = ops.mqa_attention_reference(plain, k_prefix, v_prefix, cos, sin, mask, heads,
                                       d ** -0.5)
    got = triton_attention.mqa_attention_rotated(got, k_prefix, v_prefix, mask, heads,
                                                 1 / triton_attention.LOG2E, [16, 16, 32, 4, 2])
    torch.testing.assert_close(got, want, atol=3e-5, rtol=0)


@pytest.mark.parametrize('tiles, n', [([16, 16, 16, 4, 1], 7), ([32, 16, 32, 4, 2], 7),
                                      ([16, 16, 64, 4, 1], 7), ([16, 16, 32, 4, 2], 37)])
def test_rotated_expert_attention_matches_the_reference(tiles, n):
    """The own keys after the prefix's in one index space: splits that straddle them, and a
    prefix K/V strided as the prefix leaves it (k and v of one buffer)."""
    torch.manual_seed(0)
    b, heads, d, prefix = 2, 4, 32, 37
    qkv = torch.randn(b, n, (heads + 2) * d)
    kv = torch.randn(b, prefix, 2, 1, d)
    mask = torch.rand(b, n, prefix + n) > 0.3
    mask[0, 2] = False  # a fully masked token: uniform over every key, as the eager code
    args = (qkv, kv[:, :, 0], kv[:, :, 1], mask, heads, d ** -0.5)
    torch.testing.assert_close(triton_attention.mqa_attention_rotated(*args, tiles),
                               ops.mqa_attention_rotated_reference(*args), atol=3e-5, rtol=0)


@pytest.mark.parametrize('tiles', [[16, 16, 4, 1], [32, 8, 4, 2]])
def test_prefix_flash_attention_matches_the_reference(tiles):
    torch.manual_seed(0)
    b, n, heads, d = 2, 23, 4, 32
    q = torch.randn(b, n, heads, d)
    k, v = torch.randn(2, b, n, 1, d)
    mask = torch.rand(b, n, n) > 0.3
    mask[1, 5] = False  # a padding token's row: uniform, as the eager code
    args = (q, k, v, mask, heads, d ** -0.5)
    got = triton_attention.mqa_flash(*args, tiles)
    torch.testing.assert_close(got, ops.mqa_flash_reference(*args), atol=3e-5, rtol=0)
    torch.testing.assert_close(got[1, 5], v[1, :, 0].mean(0).repeat(heads), atol=3e-5, rtol=0)
    with pytest.raises(ValueError, match='packed heads'):
        triton_attention.mqa_flash(q.transpose(1, 2), k, v, mask, heads, d ** -0.5, tiles)


def test_letterbox_kernel_makes_opencv_linear_exact_bytes():
    """`lamp::letterbox`'s kernel: frames of several sizes in buffers with stale bytes after
    them, one absent camera (tables all zero), a small output size to keep the interpreter
    quick; byte for byte OpenCV's INTER_LINEAR_EXACT resize-with-pad."""
    import numpy as np

    from lamp_ros.ops.image import resize_with_pad
    from lamp_ros.ops.letterbox import letterbox_frames
    rng = np.random.default_rng(0)
    slots, size = ('a', 'b', 'c', 'd'), 24
    images = {'a': rng.integers(0, 256, (48, 64, 3), dtype=np.uint8),
              'b': rng.integers(0, 256, (7, 30, 3), dtype=np.uint8),
              'c': rng.integers(0, 256, (5, 3, 3), dtype=np.uint8)}
    capacity = {s: 64 * 64 * 3 for s in slots}
    *frames, geometry, _ = letterbox_frames(images, slots, size, capacity)
    buffers = []
    for frame in frames:
        buffer = torch.from_numpy(rng.integers(0, 256, 64 * 64 * 3, dtype=np.uint8))
        if frame is not None:
            buffer[:frame.size] = torch.from_numpy(frame)
        buffers.append(buffer)
    got = triton_kernels.letterbox(buffers, torch.from_numpy(geometry))
    assert torch.equal(got, ops.letterbox_reference(buffers, torch.from_numpy(geometry)))
    for i, slot in enumerate(slots):
        want = (resize_with_pad(images[slot], size, size, 'linear_exact') if slot in images
                else np.zeros((size, size, 3), np.uint8))
        np.testing.assert_array_equal(got[0, i].numpy(), want, err_msg=slot)


def test_expert_attention_widens_prefix_keys_stored_narrower():
    """The prefix K/V may come in a narrower dtype than q (FP8 in an H200 probe of the
    keys): the kernel widens each block in registers, so it computes the reference's numbers
    on the widened values. (q in float32: Triton's interpreter does not run this kernel's
    bfloat16 form; that one runs on the GPU only.)"""
    torch.manual_seed(0)
    b, n, heads, d, prefix = 2, 7, 4, 32, 37
    qkv = torch.randn(b, n, (heads + 2) * d)
    k_prefix, v_prefix = torch.randn(2, b, prefix, 1, d).to(torch.float8_e4m3fn)
    angle = torch.randn(b, n, d // 2)
    mask = torch.rand(b, n, prefix + n) > 0.3
    args = (qkv, k_prefix, v_prefix, angle.cos(), angle.sin(), mask, heads, d ** -0.5)
    torch.testing.assert_close(triton_attention.mqa_attention(*args, [16, 16, 16, 4, 1]),
                               ops.mqa_attention_reference(*args), atol=3e-5, rtol=0)
