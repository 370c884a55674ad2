"""Tile choices of the expert's kernels: timed per shape on the build GPU, stored in the program.

Which block sizes stream a weight fastest depends on its shape (how many column blocks keep the
SMs busy, how deep the K pipeline must be) and on the GPU, so the lowering times a short list of
candidates for every distinct shape, on the GPU that builds the artifact, and passes the winner
to the operator as its `tiles` argument: torch.export records it in the program, and the plan
records every candidate's time. A candidate may also be another way to compute the same thing
(the expert's parts list their library form as []): the measurement decides. Off the GPU (the
CPU tests) the first candidate is taken without timing: the CPU references ignore tiles.
"""

import json
from dataclasses import dataclass, field

# (block_n, block_k, warps, stages), each tried whole and split along K (block_m covers the rows)
GEMM_TILES = ((16, 128, 4, 4), (32, 128, 4, 4), (64, 64, 4, 4), (64, 128, 4, 3),
              (128, 64, 8, 3))
SPLITS = (1, 2, 4, 8, 16)
SMS = 132  # H200; split-K candidates aim at one to four waves of programs
# (block_m, block_n, keys_per_split, warps, stages): a split holds 1-4 key blocks, so software
# pipelining buys little and 64-row blocks at 3 stages exceed the 227 KB of shared memory
ATTENTION_CANDIDATES = ((16, 64, 128, 4, 1), (16, 64, 64, 4, 1), (16, 64, 256, 4, 1),
                        (16, 128, 256, 4, 1), (32, 64, 128, 4, 1), (32, 64, 64, 4, 1),
                        (64, 64, 128, 8, 1), (32, 32, 64, 4, 2))


@dataclass
class Choice:
    """The tiles picked for one shape and what every candidate measured (ms; empty untimed)."""

    tiles: list
    timings: dict = field(default_factory=dict)


def _block_m(rows: int) -> int:
    """One row block for the action tokens (rows <= 64): the weights are streamed once."""
    return 16 if rows <= 16 else 32 if rows <= 32 else 64


def gemm_candidates(rows: int, n: int, k: int, max_tiles: int = 1024) -> list:
    """Tilings of an (rows x k) @ (k x n) GEMM: each tile shape whole, and split along K into
    enough programs to fill the GPU (at 50 rows, 20-160 column tiles leave SMs idle)."""
    bm = _block_m(rows)
    out = []
    for bn, bk, warps, stages in GEMM_TILES:
        tiles = -(-n // bn) * -(-rows // bm)
        for splits in SPLITS:
            fills = SMS // 2 <= tiles * splits <= 4 * SMS and tiles <= max_tiles
            if k % (bk * splits) or (splits > 1 and not fills):
                continue
            out.append([bm, bn, bk, warps, stages, splits])
    return out


def attention_candidates(head_dim: int) -> list:
    return [list(c) for c in ATTENTION_CANDIDATES if head_dim // 2 >= 16]


def pick(candidates: list, launch, on_gpu: bool) -> Choice:
    """The fastest of `candidates` for `launch(tiles)` (median of Triton's do_bench) on the GPU;
    the first one elsewhere."""
    if not candidates:
        raise ValueError('tuning: no tile candidate fits this shape')
    if not on_gpu:
        return Choice(list(candidates[0]))
    timings = {}
    for tiles in candidates:
        try:
            timings[str(tiles)] = gpu_time_ms(lambda: launch(tiles))
        except Exception as exc:  # a tile the compiler rejects (shared memory) is no candidate
            timings[str(tiles)] = f'rejected: {type(exc).__name__}: {str(exc)[-300:]}'
    measured = {k: v for k, v in timings.items() if isinstance(v, float)}
    if not measured:
        raise RuntimeError(f'tuning: every candidate failed: {timings}')
    best = min(measured, key=measured.get)
    return Choice(json.loads(best), timings)


def gpu_time_ms(fn) -> float:
    """Median GPU time of `fn` replayed from a CUDA graph, as the artifact runs it: timing
    Python launches would measure the launcher (tens of us), not a 3 us kernel."""
    import triton.testing
    fn()  # compile outside the capture
    return triton.testing.do_bench_cudagraph(fn, rep=20, return_mode='median')
