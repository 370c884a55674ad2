"""FP8 numbers on the CPU: the e4m3 rounding the CPU artifacts compute without a float8 dtype
is torch's float8_e4m3fn cast bit for bit, the row scales are the powers of two the kernels
take from the exponent bits, and an Fp8Linear is the linear of those numbers."""

import math

import pytest
import torch

from lamp_ros.kernels.linears import Fp8Linear, fp8_off_kernel
from lamp_ros.kernels import operators as ops


@pytest.mark.parametrize('spread', [1e-3, 1.0, 100.0])
def test_e4m3_round_is_the_float8_cast(spread):
    torch.manual_seed(0)
    v = (torch.randn(1 << 18) * spread).clamp(-448, 448)
    v[:4] = torch.tensor([448.0, -448.0, 2.0 ** -9, 2.0 ** -10 * 3])  # max, subnormal steps
    want = v.to(torch.float8_e4m3fn).float()
    assert torch.equal(ops.e4m3_round(v), want)
    assert float(ops.e4m3_steps(ops.e4m3_round(v), want).max()) == 0.0


def test_row_scales_are_powers_of_two_filling_the_range():
    amax = torch.tensor([448.0, 449.0, 224.0, 224.5, 1.0, 1e-20, 3e4, 0.0])
    scale = ops.fp8_scale(amax)
    for a, s in zip(amax.tolist(), scale.tolist()):
        assert math.frexp(s)[0] == 0.5  # a power of two
        if a > 0:
            assert 224 < a / s <= 448, (a, s)
    assert scale[:4].tolist() == [1.0, 2.0, 0.5, 1.0]


def test_fp8_rows_reference_and_the_geglu_form():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 96) * torch.logspace(-4, 4, 5)[:, None]
    codes, scale = ops.fp8_rows_reference(x)
    assert codes.dtype == torch.float32 and scale.shape == (3, 5, 1)
    assert torch.equal(codes, codes.to(torch.float8_e4m3fn).float())  # e4m3 values
    top = codes.abs().amax(-1)
    assert bool(((top >= 224) & (top <= 448)).all())  # 224+ may round down to 224
    assert float(((codes * scale - x).norm() / x.norm())) < 0.04
    gate, up = torch.randn(2, 2 * 64).split(64, -1)
    g_codes, g_scale = ops.geglu_fp8_reference(gate, up)
    torch.testing.assert_close(g_codes * g_scale, ops.geglu_reference(gate, up),
                               atol=0.0, rtol=2 ** -4)
    # through the lamp:: operators on the CPU: the same numbers
    for got, want in zip(ops.fp8_rows(x), (codes, scale)):
        assert torch.equal(got, want)
    for got, want in zip(ops.geglu_fp8(gate, up), (g_codes, g_scale)):
        assert torch.equal(got, want)


def test_add_rms_norm_fp8_is_the_add_then_the_norm_rows():
    """lamp::add_rms_norm_fp8 on the CPU: the sum rounded to x's dtype as the eager add rounds
    it, then exactly rms_norm_fp8 of that sum."""
    torch.manual_seed(0)
    x, r = torch.randn(2, 7, 64, dtype=torch.bfloat16), torch.randn(2, 7, 64) * 3
    r = r.to(torch.bfloat16)
    total, codes, scale = ops.add_rms_norm_fp8(x, r, 1e-6)
    assert torch.equal(total, x + r) and total.dtype == torch.bfloat16
    want_codes, want_scale = ops.rms_norm_fp8_reference(x + r, 1e-6)
    assert torch.equal(codes, want_codes) and torch.equal(scale, want_scale)


def test_fp8_linear_is_the_linear_of_the_quantised_numbers():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    fp8 = Fp8Linear.from_linear(linear)
    assert (fp8.in_features, fp8.out_features) == (64, 48)
    assert torch.equal(fp8.codes, fp8.codes.to(torch.float8_e4m3fn).float())
    weight = linear.weight.detach()
    assert float((fp8.dequantized() - weight).norm() / weight.norm()) < 0.04
    x = torch.randn(2, 7, 64)
    codes, scale = ops.fp8_rows_reference(x)
    want = torch.nn.functional.linear(codes * scale, fp8.dequantized(), linear.bias)
    with torch.no_grad():
        torch.testing.assert_close(fp8(x), want, atol=1e-5, rtol=0)
        assert float(((fp8(x) - linear(x)).norm() / linear(x).norm())) < 0.06
    # scales are powers of two, so a bf16 copy of the module holds the same numbers
    half = Fp8Linear.from_linear(linear).to(torch.bfloat16)
    assert torch.equal(half.dequantized(), fp8.dequantized())


def test_fp8_linears_left_off_their_kernel_are_named():
    """What the cuda backend refuses to build: an Fp8Linear the lowering did not put on its
    kernel imitates FP8 numbers in float math (kernels/linears.py fp8_off_kernel)."""
    stage = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                Fp8Linear.from_linear(torch.nn.Linear(32, 16)))
    assert fp8_off_kernel({'prefix': stage, 'vision': torch.nn.Linear(4, 4)}) == ['prefix.2']
    stage[2].to(torch.bfloat16).use_kernel()  # the cuda lowering's switch (codes to e4m3)
    assert stage[2].codes.dtype == torch.float8_e4m3fn
    assert fp8_off_kernel({'prefix': stage}) == []


def test_a_scale_the_module_dtype_cannot_hold_is_refused():
    linear = torch.nn.Linear(16, 4).half()
    with torch.no_grad():
        linear.weight.mul_(1e-6)  # row scales near 2^-27: zero in float16
    with pytest.raises(ValueError, match='not a torch.float16 number'):
        Fp8Linear.from_linear(linear)
    Fp8Linear.from_linear(linear.to(torch.bfloat16))  # bf16 has float32's exponent range


@pytest.mark.parametrize('fast', [False, True])
def test_the_kernel_form_sums_as_its_module_says(fast):
    """The kernel form's GEMM is torch._scaled_mm over float8 codes (this CPU's torch has it, so
    the kernel path itself runs here): it computes the quantised linear, and the exported
    program (what a GPU artifact runs) carries the module's accumulation mode. Whether the fast
    mode is faster and how exact it stays are GPU questions (docs/notebook/ has the H200's)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=False).to(torch.bfloat16)
    fp8 = Fp8Linear.from_linear(linear, fast_accumulation=fast)
    want_weight = fp8.dequantized()
    fp8.use_kernel()
    x = torch.randn(7, 64, dtype=torch.bfloat16)
    codes, scale = ops.fp8_rows_reference(x)
    codes = codes.to(torch.float8_e4m3fn)  # what lamp::fp8_rows gives on a GPU

    class Rows(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fp8 = fp8

        def forward(self, c, s):
            return self.fp8.from_rows(c, s, torch.bfloat16)

    want = (codes.float() * scale) @ want_weight.t()
    with torch.no_grad():
        torch.testing.assert_close(Rows()(codes, scale).float(), want, atol=0.05, rtol=0.01)
        program = torch.export.export(Rows(), (codes, scale), strict=False)
    calls = [n for n in program.graph.nodes if n.target == torch.ops.aten._scaled_mm.default]
    assert len(calls) == 1
    names = [a.name for a in calls[0].target._schema.arguments]
    arguments = {**dict(zip(names, calls[0].args)), **calls[0].kwargs}
    assert arguments.get('use_fast_accum', False) == fast
