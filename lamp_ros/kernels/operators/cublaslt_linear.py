"""`lamp::lt_linear`: a plain linear on the cuBLASLt algorithm the build measured fastest.

`table` holds, per row count the build timed (one per prompt-length graph for the prefix), the
algorithm that beat torch's op: ALGORITHM_ENTRY ints each, [rows, its 8 words, workspace
bytes] (kernels/cublaslt.py). `cublaslt` and `gpu` are where it was measured: the bytes mean
something to that library version on that GPU only, so anywhere else, or at a row count the
table does not hold, the operator is torch's op, as the stage was before. (A build with the
spec's build.gemm_algorithms false stores none.)
"""

import torch


ALGORITHM_ENTRY = 10


def algorithm_table(chosen: dict) -> list:
    """{rows: cublaslt.Algorithm} -> the operator's `table` argument (rows ascending)."""
    table = []
    for rows in sorted(chosen):
        algo = chosen[rows]
        table += [int(rows), *algo.words(), int(algo.workspace)]
    return table


def table_algorithm(table, rows: int):
    """The cublaslt.Algorithm stored for `rows` in a `table`, or None."""
    from lamp_ros.kernels import cublaslt
    if len(table) % ALGORITHM_ENTRY:
        raise ValueError(f'lt_linear: a table of {len(table)} ints is not made of '
                         f'{ALGORITHM_ENTRY}-int entries')
    for i in range(0, len(table), ALGORITHM_ENTRY):
        if table[i] == rows:
            entry = table[i + 1:i + ALGORITHM_ENTRY]
            return cublaslt.Algorithm.from_words(entry[:-1], entry[-1])
    return None


@torch.library.custom_op('lamp::lt_linear', mutates_args=())
def lt_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, weight_kn: bool,
              table: list[int], cublaslt: int, gpu: str) -> torch.Tensor:
    """x (rows, in) @ W^T [+ bias] -> (rows, out), W stored (out, in), or (in, out) with
    `weight_kn`: on the GPU the stored cuBLASLt algorithm for these rows where this process's
    cuBLASLt and GPU are the ones it was measured on, else torch's op (the reference)."""
    if x.is_cuda:
        out = _lt_linear_stored(x, weight, bias, weight_kn, table, cublaslt, gpu)
        if out is not None:
            return out
    return lt_linear_reference(x, weight, bias, weight_kn)


def lt_linear_reference(x, weight, bias, weight_kn):
    """torch's op for the same product (on the GPU: cuBLASLt's heuristic's first algorithm)."""
    wt = weight if weight_kn else weight.t()
    return torch.mm(x, wt) if bias is None else torch.addmm(bias, x, wt)


def _lt_linear_stored(x, weight, bias, weight_kn, table, version, gpu):
    """The product on the stored algorithm, or None where it may not run here."""
    from lamp_ros.kernels import cublaslt
    algo = table_algorithm(table, x.shape[0])
    if algo is None or x.dtype != torch.bfloat16:
        return None
    try:
        if cublaslt.identity(x.device) != {'cublaslt': version, 'gpu': gpu}:
            return None
    except cublaslt.CublasLtError:  # no cuBLASLt to be found in this process: torch's op
        return None
    k = x.shape[1]
    n = weight.shape[1] if weight_kn else weight.shape[0]
    plan = cublaslt.plan_for(cublaslt.GemmSpec(x.shape[0], n, k,
                                               'none' if bias is None else 'bias',
                                               weight_kn=weight_kn))
    if not plan.supports(algo):
        return None
    out = x.new_empty((x.shape[0], n))
    workspace = torch.empty(algo.workspace, dtype=torch.uint8, device=x.device)
    plan.run(algo, x.contiguous(), weight.contiguous(), out, workspace, bias=bias,
             stream=torch.cuda.current_stream(x.device).cuda_stream)
    return out


@lt_linear.register_fake
def _(x, weight, bias, weight_kn, table, cublaslt, gpu):
    return x.new_empty((x.shape[0], weight.shape[1] if weight_kn else weight.shape[0]))
