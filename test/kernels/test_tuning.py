"""Tile choices: the cache of measured choices per GPU model, and what `pick` does without a GPU.
Timing itself needs the GPU (scripts/device/kernels_check.py and every cuda build run it)."""

import json

import torch

from lamp_ros.policies.pi05.staged.expert_kernels import LIBRARY
from lamp_ros.spec import load_spec
from lamp_ros.kernels import tuning
from lamp_ros.policies.pi05.cuda import gemms
from lamp_ros.policies.pi05.config import get_preset


def _never(tiles):
    raise AssertionError('no launch expected off the GPU or from the cache')


def test_pick_takes_the_cached_choice_only_when_it_beat_every_candidate():
    candidates = [[64, 16, 128, 4, 4, 1, 0], [64, 32, 128, 4, 4, 2, 0], LIBRARY]
    measured = [str(c) for c in candidates] + ['[64, 64, 64, 4, 4, 8, 0]']

    def cached(tiles, timed=measured):
        return {'tiles': tiles, 'measured': timed}
    choice = tuning.pick(candidates, _never, on_gpu=True, cached=cached([64, 32, 128, 4, 4, 2, 0]))
    assert (choice.tiles, choice.source) == ([64, 32, 128, 4, 4, 2, 0], 'tile cache')
    assert tuning.pick(candidates, _never, True, cached=cached(LIBRARY)).tiles == LIBRARY
    for stale in (cached([64, 64, 64, 4, 4, 8, 0]),  # no longer a candidate
                  cached(LIBRARY, measured[1:])):  # a candidate it was never timed against
        again = tuning.pick(candidates, _never, on_gpu=False, cached=stale)
        assert (again.tiles, again.source) == (candidates[0], 'first candidate')


def test_the_h200_cache_covers_pi05_full_with_current_candidates():
    """The cache's keys and choices follow the candidate lists (whether a build may reuse a
    choice, or must time candidates added since, is `pick`'s test above)."""
    with open(tuning.cache_path('NVIDIA H200'), encoding='utf-8') as f:
        cache = json.load(f)
    cfg = get_preset('pi05_full')
    e, rows = cfg.expert, cfg.action_horizon
    width, qkv = e.width, (e.num_heads + 2) * e.head_dim
    candidates = {
        f'qkv {rows}x{qkv}x{width}': tuning.gemm_candidates(rows, qkv, width)
        + tuning.premade_candidates(rows, qkv, width, False, 2),
        f'attention {rows}x{e.num_heads}x{e.head_dim} over {cfg.prefix_len}+{rows}':
            tuning.attention_candidates(e.head_dim),
        f'o {rows}x{width}x{e.num_heads * e.head_dim}':
            tuning.gemm_candidates(rows, width, e.num_heads * e.head_dim),
        f'gate_up {rows}x{e.mlp_dim}x{width}': tuning.gemm_candidates(rows, e.mlp_dim, width)
        + tuning.premade_candidates(rows, e.mlp_dim, width, True, 2),
        f'down {rows}x{width}x{e.mlp_dim}': tuning.gemm_candidates(rows, width, e.mlp_dim),
        f'prefix_attention {cfg.prefix_len}x{cfg.llm.num_heads}x{cfg.llm.head_dim}':
            tuning.flash_candidates(),
    }
    # the qkv rotating q and k and the attention after it (expert_layers._choose_rope): each form's
    # tilings (the float32 reference checks them, untimed), then the pair as chosen or rotated
    attention = f'{rows}x{e.num_heads}x{e.head_dim} over {cfg.prefix_len}+{rows}'
    candidates[f'qkv_rope {rows}x{qkv}x{width}'] = tuning.rope_premade_candidates(
        rows, qkv, width, e.head_dim, 2)
    candidates[f'attention_rotated {attention}'] = tuning.attention_candidates(
        e.head_dim, rotated=True)
    candidates[f'rope_in_qkv {rows}x{qkv}x{width} + {attention}'] = [[0], [1]]
    # the weight layouts of the vision's and prefix's plain linears (gemms.KN / NK)
    v, llm = cfg.vision, cfg.llm
    patches, kv = len(cfg.camera_slots) * v.num_patches, 2 * llm.num_kv_heads * llm.head_dim
    for shape in (f'{patches}x{v.width}->{3 * v.width} +bias', f'{patches}x{v.width}->{v.width} '
                  f'+bias', f'{patches}x{v.mlp_dim}->{v.width} +bias',
                  f'{cfg.prefix_len}x{llm.width}->{llm.num_heads * llm.head_dim + kv}',
                  f'{cfg.prefix_len}x{llm.width}->{kv}',
                  f'{cfg.prefix_len}x{llm.num_heads * llm.head_dim}->{llm.width}'):  # the o
        candidates[f'linear {shape}'] = [gemms.NK, gemms.KN]
    # their cuBLASLt algorithms (gemms.choose_gemm_algorithms), per shape in the layout
    # chosen above and per row count: the vision's patches, the prefix's prompt lengths; the
    # candidates are torch's op and the heuristic's first GEMM_ALGORITHMS (as many as it gave)
    versions = {key.split()[0] for key in cache['tiles'] if key.startswith('cublaslt')}
    assert len(versions) == 1, versions  # one cuBLASLt measured the choices
    (version,) = versions
    spec = load_spec('config/specs/pi05_full.yaml')
    prefix_rows = [cfg.image_tokens + n for n in [*spec.fusion['text_lengths'], cfg.max_token_len]]
    algorithms = [gemms.TORCH_GEMM] + [[1, i] for i in range(gemms.GEMM_ALGORITHMS)]
    for shape in [key.removeprefix('linear ') for key in candidates if key.startswith('linear')]:
        counts, rest = shape.split('x', 1)
        layout = ' (in, out)' if cache['tiles'][f'linear {shape}'] == gemms.KN else ''
        for rows in prefix_rows if int(counts) == cfg.prefix_len else [int(counts)]:
            candidates[f'{version} linear {rows}x{rest}{layout}'] = algorithms
    assert set(cache['tiles']) == set(candidates)
    for key, tiles in cache['tiles'].items():
        assert tiles == LIBRARY or tiles in candidates[key], key
        assert key in cache['timings_ms']
        assert not key.startswith('cublaslt') or str(tiles) in cache['timings_ms'][key], key


def test_the_tile_cache_is_per_gpu_model():
    cache = tuning.cached_tiles('NVIDIA H200')
    assert cache and all(set(c) == {'tiles', 'measured'} for c in cache.values())
    assert tuning.cached_tiles('Some Other GPU') == {}


def test_premade_candidates_fit_the_shape_and_the_shared_memory():
    """Every premade tiling divides the weight rows and K, and its stages fit: float32 tiles
    take twice the bytes, so fewer fit (none at the full expert's gate/up)."""
    bf16 = tuning.premade_candidates(50, 4096, 1024, True, 2)
    fp32 = tuning.premade_candidates(50, 4096, 1024, True, 4)
    assert len(bf16) == 4 and len(fp32) < len(bf16)
    for bw, bk, _, stages, _ in bf16:
        assert 4096 % bw == 0 and 1024 % bk == 0
        assert stages * (2 * bw + 64) * bk * 2 <= tuning.SHARED_MEMORY
    assert all(c[1] == 64 for c in tuning.premade_candidates(50, 192, 64, False, 4))  # K = 64
    assert tuning.premade_candidates(65, 192, 64, False, 2) == []  # one token block at most


def test_gemm_candidates_fit_the_shape():
    for n, k in ((2560, 1024), (1024, 4096), (96, 64)):
        for bm, bn, bk, warps, stages, splits, swap in tuning.gemm_candidates(50, n, k):
            assert k % (bk * splits) == 0 and bm == 64 and swap in (0, 1)
            if splits > 1:
                assert tuning.SMS // 2 <= -(-n // bn) * splits <= 4 * tuning.SMS


def test_record_keeps_what_a_build_measured(tmp_path):
    path = str(tmp_path / 'gpu.json')
    with open(tuning.cache_path('NVIDIA H200'), encoding='utf-8') as f:
        before = json.load(f)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(before, f)
    key = 'o 50x1024x2048'
    built = {key: {'tiles': [64, 64, 128, 4, 4, 8, 1], 'source': 'measured',
                   'timings': {'[64, 64, 128, 4, 4, 8, 1]': 0.0041, '[]': 0.0098,
                               '[64, 128, 128, 4, 3, 16, 1]': 'rejected: OutOfResources'}},
             'qkv 50x2560x1024': {'tiles': [], 'source': 'tile cache', 'timings': {}}}
    assert tuning.record('NVIDIA H200', built, path) == [key]
    with open(path, encoding='utf-8') as f:
        after = json.load(f)
    assert after['tiles'][key] == [64, 64, 128, 4, 4, 8, 1]
    assert after['timings_ms'][key] == {'[64, 64, 128, 4, 4, 8, 1]': 0.0041, '[]': 0.0098,
                                        '[64, 128, 128, 4, 3, 16, 1]': 'rejected: OutOfResources'}
    for other in set(before['tiles']) - {key}:  # what the build took from the cache stays
        assert after['tiles'][other] == before['tiles'][other]
        assert after['timings_ms'][other] == before['timings_ms'][other]


def test_an_artifacts_plan_and_evidence_refill_the_cache(tmp_path):
    """plan.json keeps each tuned choice, evidence/build.json how it was made
    (tuning.split_record); scripts/update_tile_cache.py joins the two back and records what
    the build measured, as from the build's own record."""
    from load_script import load_script
    key = 'o 50x1024x2048'
    recorded = {key: {'tiles': [64, 64, 128, 4, 4, 8, 1], 'source': 'measured', 'errors': {},
                      'timings': {'[64, 64, 128, 4, 4, 8, 1]': 0.0041, '[]': 0.0098}},
                'qkv 50x2560x1024': {'tiles': [], 'source': 'tile cache', 'timings': {},
                                     'errors': {}}}
    choices, how = tuning.split_record(recorded)
    assert choices == {key: [64, 64, 128, 4, 4, 8, 1], 'qkv 50x2560x1024': []}
    assert all('tiles' not in h for h in how.values()) and how[key]['source'] == 'measured'
    assert tuning.join_record(choices, how) == recorded
    plan, build = tmp_path / 'plan.json', tmp_path / 'build.json'
    plan.write_text(json.dumps({'groups': [{'name': 'g02_cuda', 'build': {'tiles': choices}},
                                           {'name': 'g01_host', 'build': {}}]}))
    build.write_text(json.dumps({'groups': {'g02_cuda': {'tuning': how}}}))
    script = load_script('scripts', 'update_tile_cache.py')
    assert script.measured_tiles(str(plan), str(build)) == recorded
    cache = str(tmp_path / 'gpu.json')
    assert tuning.record('NVIDIA H200', script.measured_tiles(str(plan), str(build)),
                         cache) == [key]


def test_a_cache_timed_another_way_is_neither_reused_nor_merged(tmp_path, monkeypatch):
    """Choices timed on L2-resident weights (the cache before TIMING existed) won another
    problem than the step's: a build re-measures, and its record starts a fresh cache."""
    with open(tuning.cache_path('NVIDIA H200'), encoding='utf-8') as f:
        current = json.load(f)
    assert current['timing'] == tuning.TIMING
    old = {k: v for k, v in current.items() if k != 'timing'}
    monkeypatch.setattr(tuning, 'TILE_CACHE', str(tmp_path))
    path = tuning.cache_path('NVIDIA H200')
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(old, f)
    assert tuning.cached_tiles('NVIDIA H200') == {}
    key = 'o 50x1024x2048'
    built = {key: {'tiles': [64, 32, 128, 4, 4, 4, 0], 'source': 'measured',
                   'timings': {'[64, 32, 128, 4, 4, 4, 0]': 0.0062, '[]': 0.0098}}}
    assert tuning.record('NVIDIA H200', built) == [key]
    with open(path, encoding='utf-8') as f:
        fresh = json.load(f)
    assert fresh['timing'] == tuning.TIMING and list(fresh['tiles']) == [key]
    assert set(tuning.cached_tiles('NVIDIA H200')) == {key}


def test_pick_reports_the_time_of_one_call(monkeypatch):
    """A launch that runs the kernel once per layer is timed whole, then divided: the
    timings are per call, comparable with the per-kernel profile. (Off the GPU nothing is
    timed, so this checks the bookkeeping with a stand-in clock, not a GPU.)"""
    clock = iter([6.0, 3.0])
    monkeypatch.setattr(tuning, 'gpu_time_ms', lambda fn: next(clock))
    choice = tuning.pick([[1], [2]], lambda tiles: None, on_gpu=True, calls=3)
    assert choice.tiles == [2] and choice.timings == {'[1]': 2.0, '[2]': 1.0}


def test_pick_refuses_a_candidate_that_disagrees_with_the_reference_form(monkeypatch):
    """With a reference form, each candidate's output is compared with the reference's before
    it is timed: a fast but wrong tiling (or one that makes NaN) is refused with its error and
    the fastest candidate that agrees wins; the errors are reported. (The comparison runs the
    candidates' launches for real; only the clock is a stand-in, as off the GPU nothing is
    timed.)"""
    want = torch.linspace(-2, 2, 12, dtype=torch.bfloat16).reshape(3, 4)
    outputs = {'[]': want, '[1]': want * (1 + 2 ** -8), '[2]': want.flip(0),
               '[3]': torch.full_like(want, float('nan'))}
    timed = []

    def clock(fn):
        timed.append(fn())
        return {'[]': 5.0, '[1]': 4.0}[str(timed[-1][1])]

    monkeypatch.setattr(tuning, 'gpu_time_ms', clock)
    choice = tuning.pick([[1], [2], [3], LIBRARY],
                         lambda tiles: [outputs[str(tiles)], tiles], on_gpu=True,
                         reference=LIBRARY)
    assert choice.tiles == [1]
    assert set(choice.timings) == {'[]', '[1]', '[2]', '[3]'}
    assert choice.timings['[2]'].startswith('rejected: disagrees with []')
    assert choice.timings['[3]'].startswith('rejected: disagrees with [] (max rel error inf')
    assert 0 < choice.errors['[1]'] < tuning.agreement(want) < choice.errors['[2]']
    assert tuning.agreement(want.float()) < tuning.agreement(want)


def test_a_reference_that_only_checks_is_neither_timed_nor_picked(monkeypatch):
    """time_reference=False: the reference (a float32 reference implementation, which would
    be 'fast' when it returns a tensor made beforehand) checks the candidates, is listed as not
    timed, so a cache of the choice covers it, and cannot win. (Stand-in clock, as above.)"""
    want = torch.ones(2, 3)
    monkeypatch.setattr(tuning, 'gpu_time_ms', lambda fn: {'[1]': 2.0, '[2]': 1.0}[
        str(fn()[1])])
    choice = tuning.pick([[1], [2], LIBRARY], lambda tiles: [want, tiles], on_gpu=True,
                         reference=LIBRARY, time_reference=False)
    assert choice.tiles == [2]
    assert choice.timings == {'[]': 'reference, not timed', '[1]': 2.0, '[2]': 1.0}


def test_rope_premade_candidates_pair_the_halves_of_a_head():
    """A rotating qkv's program takes block_w / 2 dims of each half of a head: those must tile
    the half (128 at pi0.5's head dim of 256, 16 at pi05_tiny's 32)."""
    full = tuning.rope_premade_candidates(50, 2560, 1024, 256, 2)
    assert full and all(128 % (c[0] // 2) == 0 for c in full)
    tiny = tuning.rope_premade_candidates(50, 192, 64, 32, 4)
    assert tiny and all(c[0] == 32 for c in tiny)  # the 64-row tilings' halves would not fit
    assert all(c in tuning.premade_candidates(50, 192, 64, False, 4) for c in tiny)


def test_disagreement_is_relative_to_the_largest_reference_value():
    want = torch.tensor([[100.0, -1.0], [0.5, 0.0]])
    assert tuning.disagreement([want + 1.0], [want]) == 0.01
    assert tuning.disagreement(want, want) == 0.0
    assert tuning.disagreement(want[:1], want) == float('inf')  # another shape
    assert tuning.disagreement([want, want], [want]) == float('inf')  # another count
