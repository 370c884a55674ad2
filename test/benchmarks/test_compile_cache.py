"""The torch.compile baseline's portable compile cache (bench/baselines.py): saved in chunks by
a cold compile, loaded by a later process, which then compiles from it. Run here on the CPU with
a small module in two fresh processes (each with its own empty inductor cache), as the GPU
bench's two device calls do with the full policy."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODE = '''
import json, sys, torch
from bench import baselines
baselines.CHUNK_BYTES = 5_000  # several chunks from a small cache (~18 KB compressed)
class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 8)
    def sample_actions(self, x):
        return torch.relu(self.linear(x)).sum(-1)
torch.manual_seed(0)
model = Small()
x = torch.randn(4, 16)
fn, info = baselines.torch_compile(model, (x,), mode='default', cache=sys.argv[1])
torch.testing.assert_close(fn(x), model.sample_actions(x))
print(json.dumps(info))
'''


@pytest.mark.skipif(not (shutil.which('g++') or shutil.which('c++')),
                    reason='inductor needs a C++ compiler on the CPU')
def test_a_cold_compile_leaves_a_cache_the_next_process_loads(tmp_path):
    cache = str(tmp_path / 'torch_compile.cache')
    infos = []
    for run in range(2):
        env = {**os.environ, 'PYTHONPATH': ROOT,
               'TORCHINDUCTOR_CACHE_DIR': str(tmp_path / f'inductor{run}')}
        done = subprocess.run([sys.executable, '-c', CODE, cache], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        infos.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = infos
    assert cold['cache'].startswith('saved') and warm['cache'].startswith('loaded')
    assert warm['cold_compile_s'] == cold['compile_s']
    chunks = sorted(p for p in os.listdir(tmp_path) if p.startswith('torch_compile.cache.0'))
    assert len(chunks) > 1 and all(os.path.getsize(tmp_path / p) <= 5_000 for p in chunks)
    with open(f'{cache}.json', encoding='utf-8') as f:
        meta = json.load(f)
    assert meta['compression'] == 'xz'
    assert meta['stored_bytes'] == sum(os.path.getsize(tmp_path / p) for p in chunks)
    assert meta['bytes'] > 2 * meta['stored_bytes']


def test_the_cache_is_stored_compressed_in_chunks_and_read_back_whole(tmp_path, monkeypatch):
    from bench import baselines
    monkeypatch.setattr(baselines, 'CHUNK_BYTES', 100)
    cache = str(tmp_path / 'c')
    data = b'inductor kernels ' * 400 + bytes(range(256)) * 4
    with open(f'{cache}.007', 'wb') as f:  # a chunk of an older, longer cache of the name
        f.write(b'stale')
    stored = baselines.write_compile_cache(cache, data, {'cold_compile_s': 1.5})
    assert stored < len(data) // 4
    assert sorted(os.listdir(tmp_path))[-2:] == [f'c.{(stored - 1) // 100:03d}', 'c.json']
    got, meta = baselines.read_compile_cache(cache)
    assert got == data
    assert meta == {'cold_compile_s': 1.5, 'bytes': len(data), 'stored_bytes': stored,
                    'compression': 'xz'}


def test_a_cache_saved_before_compression_still_loads(tmp_path):
    from bench import baselines
    cache = str(tmp_path / 'c')
    for i, part in enumerate((b'abc', b'de')):
        with open(f'{cache}.{i:03d}', 'wb') as f:
            f.write(part)
    with open(f'{cache}.json', 'w', encoding='utf-8') as f:
        json.dump({'cold_compile_s': 2.0, 'bytes': 5}, f)
    assert baselines.read_compile_cache(cache) == (b'abcde', {'cold_compile_s': 2.0, 'bytes': 5})


def test_a_missing_chunk_or_unknown_compression_is_refused_with_the_reason(tmp_path, monkeypatch):
    from bench import baselines
    monkeypatch.setattr(baselines, 'CHUNK_BYTES', 50)
    cache = str(tmp_path / 'c')
    stored = baselines.write_compile_cache(cache, os.urandom(300), {})
    os.remove(f'{cache}.001')
    with pytest.raises(ValueError, match=f'hold {stored - 50} bytes.*says {stored}'):
        baselines.read_compile_cache(cache)
    with open(f'{cache}.json', 'w', encoding='utf-8') as f:
        json.dump({'compression': 'zip', 'stored_bytes': stored - 50}, f)
    with pytest.raises(ValueError, match="unknown compression 'zip'"):
        baselines.read_compile_cache(cache)
