"""docs/own-policy.md's worked example, as a user follows it: its `file=` blocks written into a
fresh folder (a package outside lamp_ros), then its commands: compile, run, inspect, with the
folder on PYTHONPATH, and the refusal where it is not."""

import os
import re
import subprocess
import sys

import lamp_ros

DOC = 'docs/own-policy.md'


def _files(text: str) -> dict:
    return {m.group(1): m.group(2) for m in
            re.finditer(r'```\w+ file=(\S+)\n(.*?)```', text, flags=re.S)}


# the lamp_ros under test, where the venv's editable install points elsewhere (a worktree)
LAMP_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(lamp_ros.__file__)))


def _lamp(args, cwd, pythonpath=True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['PYTHONPATH'] = os.pathsep.join(['.', LAMP_ROOT] if pythonpath else [LAMP_ROOT])
    return subprocess.run([sys.executable, '-m', 'lamp_ros.cli', *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_worked_example_compiles_and_runs_as_written(tmp_path):
    with open(DOC, encoding='utf-8') as f:
        text = f.read()
    files = _files(text)
    assert set(files) == {'my_policy/glue.py', 'my_policy/gains.json', 'my_policy/policy.py',
                          'my_policy/__init__.py', 'my_policy.yaml'}
    # the contract is lamp_ros.api: the example imports nothing else of lamp_ros
    imported = {m for content in files.values()
                for m in re.findall(r'^(?:from|import) (lamp_ros\S*)', content, flags=re.M)}
    assert imported == {'lamp_ros.api'}, imported
    for rel, content in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    # the commands of "Build and run it", as written there (vla_node is the ROS tests')
    section = text.split('## Build and run it', 1)[1].split('```', 2)[1]
    commands = [line.split('#')[0].split()[1:] for line in section.splitlines()
                if line.startswith('PYTHONPATH=. lamp ')]
    assert [c[1] for c in commands] == ['compile', 'run', 'inspect']
    for command in commands:
        result = _lamp(command[1:], tmp_path)
        assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-3000:])
        if command[1] == 'inspect':
            assert 'my_policy.glue' in result.stdout and 'offset_to_chunk' in result.stdout
    elsewhere = tmp_path / 'elsewhere'  # (`python -m` puts the working directory on the path)
    elsewhere.mkdir()
    refused = _lamp(['run', str(tmp_path / 'artifacts' / 'my_policy'), '--ticks', '3', '--fast'],
                    elsewhere, pythonpath=False)
    assert refused.returncode != 0
    assert "module 'my_policy.glue' cannot be imported" in refused.stderr, refused.stderr
