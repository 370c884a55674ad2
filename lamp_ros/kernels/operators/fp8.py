"""FP8 rows: e4m3 codes and a power-of-two scale per row (the FP8 GEMMs' activations).

e4m3 keeps 4 significant bits; a row's scale is the power of two that brings its largest
magnitude into (224, 448]. A power of two is exact in every float dtype, so a scale survives
the cast of a module to bf16, and codes * scale is exact: the only rounding is the code's.
`lamp::fp8_rows` makes the rows of any x; `rms_norm_fp8`, `add_rms_norm_fp8` and `geglu_fp8`
make them in the pass that computes x, which is then never stored in bf16.
"""

import torch

from lamp_ros.kernels.operators.activations import geglu_reference
from lamp_ros.kernels.operators.lazy_triton import load_triton_kernels as _triton
from lamp_ros.kernels.operators.norms import rms_norm_reference


E4M3_MAX = 448.0


def e4m3_round(v: torch.Tensor) -> torch.Tensor:
    """float32 v within +-448 -> the nearest e4m3 value (ties to even), still float32.

    Veltkamp's split keeps the top 4 significant bits of a float32 exactly (no float8 dtype,
    so the CPU artifacts' ONNX export can hold it); below 2^-6 e4m3 is subnormal, a fixed step
    of 2^-9. Bit for bit what `.to(torch.float8_e4m3fn)` gives (tested)."""
    c = v * 1048577.0  # 2^20 + 1: 24 - 20 = 4 bits stay
    top = c - (c - v)
    return torch.where(v.abs() < 2.0 ** -6, torch.round(v * 512.0) / 512.0, top)


def e4m3_steps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in e4m3 steps (the spacing of codes at the larger magnitude): how far apart
    two quantisations of the same numbers are."""
    big = torch.maximum(a.abs(), b.abs()).clamp(min=2.0 ** -6)
    return (a - b).abs() / torch.pow(2.0, torch.floor(torch.log2(big)) - 3)


def fp8_scale(amax: torch.Tensor) -> torch.Tensor:
    """The power of two 2^e with amax / 2^e in (224, 448] (amax 0: the smallest one used)."""
    amax = amax.float().clamp(min=2.0 ** -100)
    e = torch.floor(torch.log2(amax))
    e = e - (torch.pow(2.0, e) > amax).float() + (torch.pow(2.0, e + 1) <= amax).float()
    mantissa = amax / torch.pow(2.0, e)  # [1, 2), exact: a power-of-two division
    return torch.pow(2.0, e - 8 + (mantissa > 1.75).float())


def fp8_rows_reference(x: torch.Tensor) -> tuple:
    """x (..., K) -> (codes (..., K) float32 e4m3 values, scale (..., 1) float32)."""
    xf = x.float()
    scale = fp8_scale(xf.abs().amax(-1, keepdim=True))
    return e4m3_round(xf / scale), scale


def _fp8_fake(x: torch.Tensor) -> tuple:
    codes_dtype = torch.float8_e4m3fn if x.device.type == 'cuda' else torch.float32
    return (torch.empty(x.shape, dtype=codes_dtype, device=x.device),
            torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device))


@torch.library.custom_op('lamp::fp8_rows', mutates_args=())
def fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., K) as FP8 rows: (codes, scale (..., 1) float32); codes are float8_e4m3fn on
    CUDA (what torch._scaled_mm reads), their float32 values on the CPU."""
    if x.is_cuda:
        return _triton().fp8_rows(x)
    return fp8_rows_reference(x)


@fp8_rows.register_fake
def _(x):
    return _fp8_fake(x)


@torch.library.custom_op('lamp::rms_norm_fp8', mutates_args=())
def rms_norm_fp8(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The unit RMSNorm of x, in x's dtype, as FP8 rows in one pass (what an FP8 GEMM after
    the norm reads; the normed rows are never stored)."""
    if x.is_cuda:
        return _triton().fp8_rows(x, eps=eps)
    return rms_norm_fp8_reference(x, eps)


def rms_norm_fp8_reference(x, eps):
    return fp8_rows_reference(rms_norm_reference(x, None, None, eps))


@rms_norm_fp8.register_fake
def _(x, eps):
    return _fp8_fake(x)


@torch.library.custom_op('lamp::add_rms_norm_fp8', mutates_args=())
def add_rms_norm_fp8(x: torch.Tensor, residual: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x + residual in x's dtype, and its unit RMSNorm as FP8 rows) in one pass: the prefix's
    attention output added to the residual stream by the kernel that makes the MLP's FP8 rows,
    where a GEMM epilogue would have had torch copy the residual into its output first."""
    if x.is_cuda:
        return _triton().fp8_rows(x, eps=eps, residual=residual)
    return add_rms_norm_fp8_reference(x, residual, eps)


def add_rms_norm_fp8_reference(x, residual, eps):
    total = (x.float() + residual.float()).to(x.dtype)
    return (total, *rms_norm_fp8_reference(total, eps))


@add_rms_norm_fp8.register_fake
def _(x, residual, eps):
    return (torch.empty_like(x), *_fp8_fake(x))


@torch.library.custom_op('lamp::geglu_fp8', mutates_args=())
def geglu_fp8(gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """gelu_tanh(gate) * up as FP8 rows in one pass (the product never stored in bf16)."""
    if gate.is_cuda:
        return _triton().fp8_rows(gate, up)
    return geglu_fp8_reference(gate, up)


def geglu_fp8_reference(gate, up):
    return fp8_rows_reference(geglu_reference(gate.float(), up.float()))


@geglu_fp8.register_fake
def _(gate, up):
    return _fp8_fake(gate)
