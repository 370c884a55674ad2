"""Tile choices of the expert's kernels: timed per shape on the build GPU, stored in the program.

Which block sizes stream a weight fastest depends on its shape (how many column blocks keep the
SMs busy, how deep the K pipeline must be) and on the GPU, so the lowering times a short list of
candidates for every distinct shape, on the GPU that builds the artifact, and passes the winner
to the operator as its `tiles` argument: torch.export records it in the program, and the plan
records every candidate's time. A candidate may also be another way to compute the same thing
(the expert's parts list their library form as []): the measurement decides. Off the GPU (the
CPU tests) the first candidate is taken without timing: the CPU references ignore tiles. On
the GPU each candidate's output is first checked against a reference form's (the library form,
`pick(reference=)`): a tiling a kernel gets wrong is refused, not timed.

A candidate is timed as the Euler step runs it: one launch calls the kernel once per layer, each
on its own weights, so they stream from HBM (TIMING). Measuring every candidate costs on the
order of a minute of a build, so the choices a build measured are kept per GPU model in
kernels/tiles/<gpu>.json (with every candidate's time) and reused when the GPU, part and shape
match and every current candidate was among those timed, the same way (a candidate added later
gets measured); `lamp compile --measure-tiles` measures anyway.
"""

import json
import os
import re
from dataclasses import dataclass, field

# (block_n, block_k, warps, stages), each tried whole and split along K (block_m covers the rows)
# (trimmed to the H200's front-runners: (64, 64) and (128, 64) blocks and 8-16 splits never won)
GEMM_TILES = ((16, 128, 4, 4), (32, 128, 4, 4), (64, 128, 4, 3))
SPLITS = (1, 2, 4)  # 8, re-timed once the split sum was unrolled, lost again
# the same, swapped (the weight block as the MMA's M side, 64+ rows): few column blocks, so
# split along K into 2-16 slices to fill the GPU
SWAPPED_TILES = ((64, 128, 4, 4), (128, 128, 4, 3))
SWAPPED_SPLITS = (1, 2, 4, 8, 16)
SMS = 132  # H200; split-K candidates aim at one to four waves of programs
# (block_w, block_k, warps, stages, swap) of the normed GEMMs as plain streams on descriptor
# loads (triton_premade.py): the front-runners of their timings on the H200 (16-row blocks,
# twice the programs, lost clearly at 6-8 stages; docs/notebook/)
PREMADE_TILES = ((32, 128, 4, 4, 0), (32, 128, 4, 6, 0), (64, 128, 4, 4, 1), (64, 128, 4, 6, 1),
                 (64, 64, 4, 8, 1))
SHARED_MEMORY = 220 * 1024  # what a program's pipeline stages may take (the H200 has 227 KB)
# (block_m, block_n, keys_per_split, warps, stages): a split holds 1-8 key blocks; 64-row
# blocks at 3 stages exceed the 227 KB of shared memory (one key block per split, 16-64 rows,
# lost on the H200; tile cache). Two stages pay off only with 4+ blocks a split: per call, K/V
# strided as the artifact reads them, 256 keys a split ran faster at two stages than at one,
# 128 keys slower. (Timed by a build and dropped: 384 keys at two stages, 32-row blocks at two
# stages; three stages of 256 keys exceed the shared memory; docs/notebook/)
ATTENTION_CANDIDATES = ((16, 64, 128, 4, 1), (16, 64, 256, 4, 1), (16, 128, 256, 4, 1),
                        (32, 64, 128, 4, 1), (16, 64, 256, 4, 2), (16, 64, 512, 4, 2))
# the rotated attention (the own keys after the prefix's, nothing rotated in the kernel:
# triton_attention.mqa_attention_rotated): at 832 + 50 keys 128-key splits at two stages,
# with their merge, beat the pair that rotates in the attention kernel (ATTENTION_CANDIDATES');
# 64-row blocks (wgmma) and 448-key splits lost (docs/notebook/)
ROTATED_ATTENTION_CANDIDATES = ((16, 64, 128, 4, 2), (16, 64, 128, 4, 1), (16, 64, 256, 4, 2),
                                (16, 32, 128, 4, 2), (16, 32, 128, 4, 3), (16, 64, 192, 4, 2),
                                (32, 64, 128, 4, 2))
# (block_m, block_n, warps, stages) of the prefix's flash attention: every program sweeps all
# keys (968 in pi05_full; 7,744 query rows give 61-242 row blocks, about one wave)
FLASH_CANDIDATES = ((64, 64, 4, 2), (64, 32, 4, 3), (128, 64, 8, 2), (128, 32, 8, 3),
                    (32, 64, 4, 2))
# how the timings were taken: a cache measured otherwise is not reused (its winners won another
# problem). Before this, every candidate was timed on one layer's weights, replayed: 4-17 MB
# that stayed in the 50 MB L2 between replays, so the GEMMs were timed L2-bound.
TIMING = 'per layer, each call of a launch on another layer\'s weights (HBM, as in the step)'
TILE_CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tiles')


@dataclass
class Choice:
    """The tiles picked for one shape and what every candidate measured (ms; empty untimed)."""

    tiles: list
    timings: dict = field(default_factory=dict)
    source: str = 'first candidate'  # 'measured', 'tile cache' or 'first candidate' (no GPU)
    # each checked candidate's max |output - reference form's| / max |reference form's|
    errors: dict = field(default_factory=dict)


# How far a candidate's output may stray from the reference form's before it is refused: the
# forms round at different points (bf16 parts agree to ~1e-2 of their largest value on the
# H200; float32 ones to ~1e-6), while a wrong kernel is off by the values themselves.
AGREEMENT = {'float32': 1e-3, 'float64': 1e-6}
AGREEMENT_LOW_PRECISION = 3e-2  # bf16, fp16


def _tensors(out) -> list:
    """The tensors of a launch's result (a tensor, or nested lists / tuples of them)."""
    if isinstance(out, (list, tuple)):
        return [t for each in out for t in _tensors(each)]
    return [out] if hasattr(out, 'shape') else []


def disagreement(out, reference) -> float:
    """max |out - reference| / max |reference| over every output tensor; inf where the
    shapes differ or out has a NaN / inf."""
    outs, refs = _tensors(out), _tensors(reference)
    if len(outs) != len(refs) or not refs:
        return float('inf')
    worst = 0.0
    for got, want in zip(outs, refs):
        if got.shape != want.shape:
            return float('inf')
        got, want = got.detach().double(), want.detach().double()
        if not bool(got.isfinite().all()):
            return float('inf')
        scale = max(float(want.abs().max()), 1e-30)
        worst = max(worst, float((got - want).abs().max()) / scale)
    return worst


def agreement(reference) -> float:
    """The largest disagreement accepted against a reference output of this dtype."""
    dtype = str(_tensors(reference)[0].dtype).removeprefix('torch.')
    return AGREEMENT.get(dtype, AGREEMENT_LOW_PRECISION)


def _block_m(rows: int) -> int:
    """One row block for the action tokens (rows <= 64): the weights are streamed once."""
    return 16 if rows <= 16 else 32 if rows <= 32 else 64


def gemm_candidates(rows: int, n: int, k: int, max_tiles: int = 1024) -> list:
    """Tilings of an (rows x k) @ (k x n) GEMM, [block_m, block_n, block_k, warps, stages,
    splits, swap]: each tile shape whole, and split along K into enough programs to fill the
    GPU (at 50 rows, 8-160 column blocks leave SMs idle)."""
    bm = _block_m(rows)
    out = []
    for swap, shapes, splits_tried in ((0, GEMM_TILES, SPLITS),
                                       (1, SWAPPED_TILES, SWAPPED_SPLITS)):
        for bn, bk, warps, stages in shapes:
            bk = min(bk, k)  # small models (pi05_tiny: K = 64) take one K block
            tiles = -(-n // bn) * -(-rows // bm)
            for splits in splits_tried:
                fills = SMS // 2 <= tiles * splits <= 4 * SMS and tiles <= max_tiles
                if k % (bk * splits) or (splits > 1 and not fills):
                    continue
                if [bm, bn, bk, warps, stages, splits, swap] not in out:
                    out.append([bm, bn, bk, warps, stages, splits, swap])
    return out


def token_block(rows: int) -> int:
    """The premade GEMMs' one block of action tokens (16-64 rows, a power of two)."""
    return max(16, 1 << (rows - 1).bit_length())


def premade_candidates(rows: int, n: int, k: int, geglu: bool, itemsize: int) -> list:
    """Tilings of premade_gemm for (rows x k) @ (k x n) [and a second weight of n rows]:
    block_w weight rows by all tokens (one block of 16-64) a program, as many programs as
    weight blocks, every stage's tiles within the shared memory."""
    if rows > 64:
        return []
    tokens = token_block(rows)
    out = []
    for bw, bk, warps, stages, swap in PREMADE_TILES:
        bk = min(bk, k)
        stage = ((1 + geglu) * bw + tokens) * bk * itemsize
        if n % bw or k % bk or stages * stage > SHARED_MEMORY:
            continue
        if [bw, bk, warps, stages, swap] not in out:
            out.append([bw, bk, warps, stages, swap])
    return out


def attention_candidates(head_dim: int, rotated: bool = False) -> list:
    """The expert attention's tilings; rotated: mqa_attention_rotated's."""
    table = ROTATED_ATTENTION_CANDIDATES if rotated else ATTENTION_CANDIDATES
    return [list(c) for c in table if head_dim // 2 >= 16]


def rope_premade_candidates(rows: int, n: int, k: int, head_dim: int, itemsize: int) -> list:
    """premade_candidates of a q/k/v GEMM whose epilogue rotates (triton_premade's rope): a
    program's block_w / 2 rows of each half of a head must tile the half."""
    return [c for c in premade_candidates(rows, n, k, False, itemsize)
            if (head_dim // 2) % (c[0] // 2) == 0]


def flash_candidates() -> list:
    return [list(c) for c in FLASH_CANDIDATES]


def pick(candidates: list, launch, on_gpu: bool, cached: dict | None = None,
         calls: int = 1, reference: list | None = None, time_reference: bool = True) -> Choice:
    """The fastest of `candidates` for `launch(tiles)` (median of CUDA-graph replays, divided
    by the `calls` of the kernel one launch makes) on the GPU, or `cached` ({'tiles',
    'measured'}: a choice made before on this GPU model) when that measurement timed every one
    of today's candidates; the first candidate off the GPU.

    With `reference` (one of the candidates, e.g. the library form), every other candidate's
    output (what `launch` returns) must agree with the reference's within `agreement` before
    it is timed: a tiling a kernel computes wrongly is refused with its error instead of
    winning because it is fast (the build's parity check would only fail at the end). With
    time_reference False the reference only checks (a float32 reference implementation, not
    a form the part can take): it is listed as not timed, and never picked."""
    if not candidates:
        raise ValueError('tuning: no tile candidate fits this shape')
    if cached is not None and list(cached['tiles']) in [list(c) for c in candidates] \
            and {str(list(c)) for c in candidates} <= set(cached['measured']):
        return Choice(list(cached['tiles']), source='tile cache')
    if not on_gpu:
        return Choice(list(candidates[0]))
    timings, errors, want = {}, {}, None
    checked = reference is not None and reference in candidates
    order = [reference] + [c for c in candidates if c != reference] if checked else candidates
    for tiles in order:
        try:
            if checked:
                out = launch(tiles)  # also compiles, outside the timing's capture
                if tiles == reference:
                    want = [t.detach().clone() for t in _tensors(out)]
                    if not time_reference:
                        timings[str(tiles)] = 'reference, not timed'
                        continue
                elif want is not None:
                    errors[str(tiles)] = error = disagreement(out, want)
                    if not error <= agreement(want):
                        timings[str(tiles)] = (f'rejected: disagrees with {reference} (max '
                                               f'rel error {error:.3g})')
                        continue
            timings[str(tiles)] = gpu_time_ms(lambda: launch(tiles)) / calls
        except Exception as exc:  # a tile the compiler rejects (shared memory) is no candidate
            timings[str(tiles)] = f'rejected: {type(exc).__name__}: {str(exc)[-300:]}'
    measured = {k: v for k, v in timings.items() if isinstance(v, float)}
    if not measured:
        raise RuntimeError(f'tuning: every candidate failed: {timings}')
    best = min(measured, key=measured.get)
    return Choice(json.loads(best), timings, 'measured', errors)


def split_record(recorded: dict) -> tuple:
    """A build's tuning record ({key: {'tiles', 'source', 'timings', 'errors'}}, what the
    lowering writes) -> (what decides behaviour: {key: tiles}, kept in plan.json and hashed
    into the artifact id; how it was decided: {key: the rest}, kept in evidence/build.json).
    A fresh measurement and a rebuild from the tile cache it left pick the same tiles and
    differ only in the second part, so both builds get one artifact id."""
    choices = {key: r.get('tiles') for key, r in sorted(recorded.items())}
    how = {key: {f: v for f, v in r.items() if f != 'tiles'}
           for key, r in sorted(recorded.items())}
    return choices, how


def join_record(choices: dict, how: dict) -> dict:
    """The inverse of `split_record`: a tuning record for `record` from an artifact's plan
    choices and build evidence."""
    return {key: {'tiles': tiles, **how.get(key, {})} for key, tiles in choices.items()}


def cache_path(gpu_name: str) -> str:
    """kernels/tiles/<gpu>.json, e.g. nvidia_h200.json for 'NVIDIA H200'."""
    return os.path.join(TILE_CACHE, re.sub(r'[^a-z0-9]+', '_', gpu_name.lower()).strip('_')
                        + '.json')


def cached_tiles(gpu_name: str) -> dict:
    """{'<part> <shape>': {'tiles': the choice, 'measured': the candidates it was timed
    against}} from before on this GPU model ({} when none; `lamp compile --measure-tiles`
    does not read it). A choice is reused only where `measured` covers every current
    candidate: a candidate added since is measured, not silently skipped."""
    path = cache_path(gpu_name)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding='utf-8') as f:
        cache = json.load(f)
    if cache.get('timing') != TIMING:
        return {}
    return {key: {'tiles': tiles, 'measured': sorted(cache['timings_ms'].get(key, {}))}
            for key, tiles in cache['tiles'].items()}


def record(gpu_name: str, tiles: dict, path: str | None = None) -> list:
    """Keep the choices a build measured ({key: {'tiles', 'source', 'timings'}}: `join_record`
    of an artifact's plan and evidence) in this GPU model's cache -> the keys written. Entries
    the build took from the cache (no timings) leave the cache as it was."""
    path = path or cache_path(gpu_name)
    cache = {'gpu': gpu_name, 'measured': f'lamp compile on the {gpu_name}, median GPU time of '
             'CUDA-graph replays, ms', 'timing': TIMING, 'tiles': {}, 'timings_ms': {}}
    if os.path.isfile(path):
        with open(path, encoding='utf-8') as f:
            before = json.load(f)
        if before.get('timing') == TIMING:  # a cache timed otherwise is replaced, not merged
            cache = before
    written = []
    for key, choice in sorted(tiles.items()):
        if choice.get('source') != 'measured':
            continue
        cache['tiles'][key] = choice['tiles']
        # times in ms; a tiling the GPU rejected keeps its reason (it was tried: no re-measure)
        cache['timings_ms'][key] = {k: round(v, 5) if isinstance(v, float) else v[:120]
                                    for k, v in choice['timings'].items()}
        written.append(key)
    cache['tiles'] = dict(sorted(cache['tiles'].items()))
    cache['timings_ms'] = dict(sorted(cache['timings_ms'].items()))
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(cache, f, indent=1)
        f.write('\n')
    return written


def gpu_time_ms(fn) -> float:
    """Median GPU time of `fn` replayed from a CUDA graph, as the artifact runs it: timing
    Python launches would measure the launcher (tens of us), not a 3 us kernel."""
    import triton.testing
    fn()  # compile outside the capture
    return triton.testing.do_bench_cudagraph(fn, rep=20, return_mode='median')
