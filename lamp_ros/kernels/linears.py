"""Linear layers on lamp's kernels, for any model: the forms a graph pass or a cuda lowering
swaps in for an nn.Linear.

- `Fp8Linear`: a linear on e4m3 codes with power-of-two scales (FP8 GEMM numbers).
- `KNLinear`: a plain linear with its weight stored (in, out) for cuBLAS's "NN" GEMM.
- `LtLinear`: a plain linear on the cuBLASLt algorithm the build GPU measured fastest.
"""

import torch
from torch import nn

from lamp_ros.kernels import operators as kernel_ops


class Fp8Linear(nn.Module):
    """A linear in FP8 (e4m3) numbers: the weight as codes times a power-of-two scale per output
    row, each input row quantised the same way on the fly, products summed in float32.

    Off the kernel path the codes are float32 values (e4m3-exact) and the math is plain torch,
    which the CPU artifacts export to ONNX; on it (cuda lowering: `use_kernel`) the codes are
    float8_e4m3fn and the GEMM is cuBLASLt's through torch._scaled_mm with row-wise scales. The
    scales are powers of two, so both paths quantise to the same numbers; they differ only in
    the summation order, and, with `fast_accumulation`, in how the GPU sums: cuBLASLt's fast
    FP8 mode keeps the tensor cores' partial sums instead of promoting them to float32 every
    few products (faster, a little less exact; the CPU path always sums in float32)."""

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
                 fast_accumulation: bool = False):
        super().__init__()
        self.codes = nn.Parameter(codes, requires_grad=False)  # (out, in)
        self.register_buffer('scale', scale)  # (out,)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.fast_accumulation = fast_accumulation
        self.kernel = False

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear, fast_accumulation: bool = False) -> 'Fp8Linear':
        codes, scale = kernel_ops.fp8_rows_reference(linear.weight)
        dtype = linear.weight.dtype
        if not torch.equal(scale.to(dtype).float(), scale):  # float16: 2^-25 and below are 0
            raise ValueError(f'Fp8Linear: a weight row scale of {float(scale.min()):g} is not '
                             f'a {dtype} number; quantise in bfloat16 or float32')
        return cls(codes.to(dtype), scale.view(-1).to(dtype),
                   None if linear.bias is None else linear.bias.detach().clone(),
                   fast_accumulation)

    @property
    def in_features(self) -> int:
        return self.codes.shape[1]

    @property
    def out_features(self) -> int:
        return self.codes.shape[0]

    def dequantized(self) -> torch.Tensor:
        return self.codes.float() * self.scale.float()[:, None]

    @torch.no_grad()
    def use_kernel(self) -> None:
        """Codes to float8_e4m3fn (exact: they are e4m3 values), the scale to float32 (exact: a
        power of two), for torch._scaled_mm."""
        self.codes = nn.Parameter(self.codes.to(torch.float8_e4m3fn), requires_grad=False)
        self.scale = self.scale.float()
        self.kernel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        quantise = kernel_ops.fp8_rows if self.kernel else kernel_ops.fp8_rows_reference
        return self.from_rows(*quantise(x), x.dtype)

    def from_rows(self, codes: torch.Tensor, row_scale: torch.Tensor, dtype) -> torch.Tensor:
        """The linear of already quantised rows (codes (..., in), row_scale (..., 1))."""
        lead = codes.shape[:-1]
        if self.kernel:
            if codes.dtype != torch.float8_e4m3fn:  # e4m3 values in float (a reference op's)
                codes = codes.to(torch.float8_e4m3fn)  # exact
            y = torch._scaled_mm(codes.reshape(-1, self.in_features), self.codes.t(),
                                 row_scale.reshape(-1, 1), self.scale.view(1, -1),
                                 out_dtype=dtype, use_fast_accum=self.fast_accumulation)
        else:
            y = ((codes.float() * row_scale.float()) @ self.dequantized().t()).to(dtype)
        y = y.view(*lead, self.out_features)
        return y if self.bias is None else y + self.bias


def fp8_off_kernel(modules: dict) -> list:
    """'<node>.<module path>' of every Fp8Linear in `modules` ({node: stage module}) that is
    not on its kernel: its FP8 numbers are imitated in float math, at float speed. On a GPU
    that is a precision asked for and not given (the cuda backend refuses such a build)."""
    return [f'{node}.{name}' for node, stage in modules.items()
            for name, module in stage.named_modules()
            if isinstance(module, Fp8Linear) and not module.kernel]


class KNLinear(nn.Module):
    """A linear whose weight is stored (in, out), contiguous: x @ Wt + b is then a plain "NN" GEMM
    for cuBLAS, where nn.Linear's (out, in) weight makes it "TN". cuBLAS picks its kernel by layout
    as well as by shape: the vision's fc2 (768 x 4304 -> 1152) ran faster stored (in, out) than as
    nn.Linear, while its qkv ran slower (docs/notebook/). So the cuda lowering measures both
    layouts per GEMM shape on the build GPU and stores each weight the faster way
    (policies/pi05/cuda/gemms.py: choose_weight_layouts). The same products and sums; cuBLAS may
    add them in another order."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight_t = nn.Parameter(linear.weight.detach().t().contiguous(),
                                     requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        y = torch.mm(x2, self.weight_t) if self.bias is None \
            else torch.addmm(self.bias, x2, self.weight_t)
        return y.view(*x.shape[:-1], self.out_features)


class LtLinear(nn.Module):
    """A plain linear (nn.Linear or KNLinear, its weight kept as it was stored) whose GEMM runs on
    the cuBLASLt algorithm the build GPU measured fastest at each row count it will see
    (`lamp::lt_linear`; policies/pi05/cuda/gemms.py: choose_gemm_algorithms). At the prefix's
    64-token graph (832 rows) cuBLASLt's heuristic, which torch follows, picks a kernel for o that
    was clearly slower than its second algorithm, the same numbers (docs/notebook/). `algorithms`
    is {rows: cublaslt.Algorithm}; `built_for` the cuBLASLt version and GPU name they were measured
    on: elsewhere, and at other row counts, the operator is torch's op."""

    def __init__(self, linear: nn.Module, algorithms: dict, built_for: dict):
        super().__init__()
        if not algorithms:
            raise ValueError('LtLinear: no algorithm to store (keep the linear as it is)')
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight_kn = isinstance(linear, KNLinear)
        if self.weight_kn:
            self.weight_t = linear.weight_t
        else:
            self.weight = linear.weight
        self.bias = linear.bias
        self.table = kernel_ops.algorithm_table(algorithms)
        self.rows = sorted(int(r) for r in algorithms)
        self.cublaslt, self.gpu = int(built_for['cublaslt']), str(built_for['gpu'])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight_t if self.weight_kn else self.weight
        y = torch.ops.lamp.lt_linear(x.reshape(-1, self.in_features), w, self.bias,
                                     self.weight_kn, self.table, self.cublaslt, self.gpu)
        return y.view(*x.shape[:-1], self.out_features)
