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
baselines.CHUNK_BYTES = 50_000  # several chunks from a small cache
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
    assert len(chunks) > 1 and all(os.path.getsize(tmp_path / p) <= 50_000 for p in chunks)
    with open(f'{cache}.json', encoding='utf-8') as f:
        assert json.load(f)['bytes'] == sum(os.path.getsize(tmp_path / p) for p in chunks)
