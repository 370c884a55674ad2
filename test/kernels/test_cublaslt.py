"""cuBLASLt's stored algorithms on the CPU side: the binding's GemmSpec refuses forms it cannot
run, an algorithm's 64 bytes survive the trip into an exported program's int[] argument and
back, `lamp::lt_linear` computes torch's product (on the CPU its reference; the stored
algorithms run only on the GPU they were measured on: scripts/device/kernels_check.py runs them
on the H200), LtLinear keeps a stage's outputs and parameter names through torch.export, and a
stored algorithm must beat torch's op clearly (test_cuda_lowering.py: nothing is stored off the
GPU). The algorithm bytes here are made up: no cuBLASLt exists on
this machine to return real ones, and the CPU never reads them."""

import pytest
import torch

from lamp_ros.kernels.linears import KNLinear, LtLinear
from lamp_ros.kernels import cublaslt, tuning
from lamp_ros.policies.pi05.cuda import gemms
from lamp_ros.kernels import operators as kernel_ops

BUILT_FOR = {'cublaslt': 130100, 'gpu': 'NVIDIA H200'}


def _algorithm(seed: int, workspace: int = 1 << 20) -> cublaslt.Algorithm:
    """64 arbitrary bytes, high bits set in some words (they become negative int64s)."""
    return cublaslt.Algorithm(bytes((seed * 37 + i * 11) % 256 for i in range(64)), workspace)


def test_fp8_scaling_modes():
    assert cublaslt.GemmSpec(968, 2048, 16384, fp8=True).fp8_scale == 'row'
    assert cublaslt.GemmSpec(968, 2048, 16384, fp8=True, fp8_scale='scalar').fp8_scale == 'scalar'
    with pytest.raises(ValueError, match="fp8_scale 'block'"):
        cublaslt.GemmSpec(968, 2048, 16384, fp8=True, fp8_scale='block')


def test_fp8_takes_no_epilogue_and_epilogues_are_named():
    with pytest.raises(ValueError, match='FP8 form'):
        cublaslt.GemmSpec(768, 1152, 1152, 'bias', fp8=True)
    with pytest.raises(ValueError, match="epilogue 'relu'"):
        cublaslt.GemmSpec(768, 1152, 1152, 'relu')


def test_algorithm_words_round_trip():
    algo = _algorithm(3)
    words = algo.words()
    assert len(words) == 8 and any(w < 0 for w in words)  # uint64 words past 2^63
    assert cublaslt.Algorithm.from_words(words, algo.workspace) == algo
    with pytest.raises(ValueError, match='8 words, got 7'):
        cublaslt.Algorithm.from_words(words[:7], 0)


def test_algorithm_table_finds_each_row_count():
    chosen = {896: _algorithm(1, 0), 832: _algorithm(2)}
    table = kernel_ops.algorithm_table(chosen)
    assert len(table) == 2 * kernel_ops.ALGORITHM_ENTRY and table[0] == 832  # rows ascending
    assert kernel_ops.table_algorithm(table, 832) == chosen[832]
    assert kernel_ops.table_algorithm(table, 896) == chosen[896]
    assert kernel_ops.table_algorithm(table, 968) is None  # torch's op at that row count
    with pytest.raises(ValueError, match='not made of 10-int entries'):
        kernel_ops.table_algorithm(table[:-1], 832)


@pytest.mark.parametrize('kn', [False, True])
@pytest.mark.parametrize('bias', [False, True])
def test_lt_linear_is_the_linear(kn, bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 40, bias=bias)
    layer = KNLinear(linear) if kn else linear
    lt = LtLinear(layer, {6: _algorithm(1)}, BUILT_FOR)
    assert lt.weight_kn == kn
    x = torch.randn(2, 3, 48)
    torch.testing.assert_close(lt(x), linear(x), atol=1e-5, rtol=0)
    # the same parameters under the same names: the artifact's weights bind as before
    assert sorted(dict(lt.named_parameters())) == sorted(dict(layer.named_parameters()))


def test_lt_linear_needs_an_algorithm():
    with pytest.raises(ValueError, match='no algorithm'):
        LtLinear(torch.nn.Linear(8, 8), {}, BUILT_FOR)


class _TwoLinears(torch.nn.Module):
    def __init__(self, first, second):
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_exported_program_keeps_the_table(tmp_path):
    """torch.export names the operator with the table, version and GPU as constants, and the
    saved archive (what the artifact holds) gives them back bit for bit: the text axis stays
    dynamic, so one node serves every prompt length's row count."""
    torch.manual_seed(0)
    eager = _TwoLinears(torch.nn.Linear(32, 64), KNLinear(torch.nn.Linear(64, 16, bias=False)))
    chosen = {10: _algorithm(1), 12: _algorithm(2, 0)}
    model = _TwoLinears(LtLinear(eager.first, chosen, BUILT_FOR),
                        LtLinear(eager.second, {12: _algorithm(5)}, BUILT_FOR))
    x = torch.randn(1, 12, 32)
    rows = torch.export.Dim('rows', min=2, max=64)
    program = torch.export.export(model, (x,), dynamic_shapes=({1: rows},), strict=False)
    path = tmp_path / 'program.pt2'
    torch.export.save(program, str(path))
    loaded = torch.export.load(str(path))
    calls = [n for n in loaded.graph.nodes if str(n.target) == 'lamp.lt_linear.default']
    assert len(calls) == 2
    assert list(calls[0].args[4]) == kernel_ops.algorithm_table(chosen)
    assert calls[0].args[5:] == (130100, 'NVIDIA H200')
    assert calls[1].args[3] is True  # the second linear's weight is stored (in, out)
    for n in (12, 7):
        x = torch.randn(1, n, 32)
        torch.testing.assert_close(loaded.module()(x), eager(x), atol=1e-5, rtol=0)


def test_margin_keeps_torch_op_unless_clearly_faster():
    def choice(ours, best):
        return tuning.Choice([1, 2], {str(gemms.TORCH_GEMM): ours, '[1, 2]': best},
                             'measured')
    assert gemms._within_margin(choice(0.0100, 0.0099)).tiles == gemms.TORCH_GEMM
    assert gemms._within_margin(choice(0.0183, 0.0136)).tiles == [1, 2]
    cached = tuning.Choice([1, 2], source='tile cache')  # the cache keeps the decided choice
    assert gemms._within_margin(cached).tiles == [1, 2]
