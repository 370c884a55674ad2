"""The Triton kernels against the operators' reference code, in Triton's interpreter on the CPU.

Triton is not a dependency of the CPU install (CI skips this file); where it is installed (the
GPU machine, or a developer's venv) the kernels run here on CPU tensors, element by element as
the GPU would. scripts/device/kernels_check.py runs the same comparison on the GPU."""

import os

import pytest
import torch

os.environ.setdefault('TRITON_INTERPRET', '1')  # before triton is imported
pytest.importorskip('triton')
from lamp_ros.kernels import ops, triton_kernels  # noqa: E402  (after the interpreter switch)


@pytest.mark.parametrize('dtype,atol', [(torch.float32, 2e-6), (torch.bfloat16, 6.3e-2)])
def test_kernels_match_the_reference(dtype, atol):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 288, dtype=dtype)[..., :200]  # rows of a wider tensor: strided
    scale, shift = torch.randn(200), torch.randn(200)
    for mod in ((None, None), (scale, shift)):
        torch.testing.assert_close(triton_kernels.rms_norm(x, *mod, 1e-6),
                                   ops.rms_norm_reference(x, *mod, 1e-6), atol=atol, rtol=0)
    q = torch.randn(2, 7, 96, dtype=dtype)[..., :64].reshape(2, 7, 4, 16)  # q of a merged qkv
    cos, sin = torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    torch.testing.assert_close(triton_kernels.rope(q, cos, sin),
                               ops.rope_reference(q, cos, sin), atol=atol, rtol=0)
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
