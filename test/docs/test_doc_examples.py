"""The ```python examples of docs/spec.md, docs/policy.md and docs/artifact.md run as written: a
block either runs (here, in a scratch working directory, the artifact it loads being the
session's build of the same spec) or says on its first line that it is a fragment."""

import re

import numpy as np
import pytest

DOCS = ('docs/spec.md', 'docs/policy.md', 'docs/artifact.md')
FRAGMENT = '# fragment'
# the artifact folders the examples load -> the session fixture that builds the same spec
ARTIFACTS = {'artifacts/pi05_tiny': 'demo_artifact'}


def _python_blocks(path: str) -> list:
    with open(path, encoding='utf-8') as f:
        return re.findall(r'^```python\n(.*?)^```', f.read(), flags=re.S | re.M)


def _runnable() -> list:
    return [pytest.param(path, i, block, id=f'{path}[{i}]')
            for path in DOCS for i, block in enumerate(_python_blocks(path))
            if not block.startswith(FRAGMENT)]


def test_the_examples_are_found():
    blocks = {path: _python_blocks(path) for path in DOCS}
    assert [len(blocks[path]) for path in DOCS] == [1, 1, 1]
    assert blocks['docs/spec.md'][0].startswith(FRAGMENT)  # a policy package's, not runnable


@pytest.mark.parametrize('path,index,block', _runnable())
def test_the_example_runs(path, index, block, request, tmp_path, monkeypatch, capsys):
    for folder, fixture in ARTIFACTS.items():
        if f"'{folder}'" in block:
            block = block.replace(f"'{folder}'", repr(request.getfixturevalue(fixture)))
    assert 'artifacts/' not in block, 'an artifact the test does not build'
    monkeypatch.chdir(tmp_path)  # what an example writes stays here
    namespace = {}
    exec(compile(block, f'{path} example {index}', 'exec'), namespace)
    printed = capsys.readouterr().out
    if path == 'docs/policy.md':
        assert namespace['chunk'].shape == (50, 7) and printed.strip() == '(50, 7)'
    if path == 'docs/artifact.md':
        command = namespace['command']
        assert command.shape == (7,) and np.isfinite(command).all()
        assert namespace['rt'].profile()['tick']['count'] == 3
