"""Every device script in its CPU smoke (scripts/device/lib.sh: SMOKE=1): its own steps at smoke
size on this CPU, so that a Python error in a script, or in a bench it calls, fails here and not
on a device machine, whose time is scarce and whose starts often fail.

Each script says how its smoke runs in a header line, so that a new script cannot go without:
`# smoke: COMMAND` (run from the repository root with SMOKE=1, OUT and WORK in a temporary
folder, and every smoke of the run sharing its builds through SMOKE_BUILDS), or
`# smoke: run by SCRIPT` for a helper another script's smoke runs (the test checks that SCRIPT
names it). `# smoke-needs: MODULE` skips a smoke, naming the module, where this Python cannot
import it (LeRobot needs Python 3.12+, the suite's venv may be older). A smoke passes when it
exits 0; one that stops before a step only a GPU can take says so (`needs_gpu`), which the test
shows with its result."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEVICE = os.path.join(ROOT, 'scripts', 'device')
NOT_SCRIPTS = {'lib.sh', 'smoke'}  # sourced by the scripts; the smoke specs
SMOKE_LINE = re.compile(r'^# smoke: (.+)$', re.M)
NEEDS_LINE = re.compile(r'^# smoke-needs: (\S+)$', re.M)


def _scripts() -> list[str]:
    return sorted(n for n in os.listdir(DEVICE) if n not in NOT_SCRIPTS and n != '__pycache__')


def _smoke(name: str) -> str:
    with open(os.path.join(DEVICE, name), encoding='utf-8') as f:
        found = SMOKE_LINE.findall(f.read())
    assert len(found) == 1, f'scripts/device/{name}: one "# smoke: ..." header line, got {found}'
    return found[0].strip()


def _run_by(smoke: str) -> str | None:
    match = re.fullmatch(r'run by (\S+)', smoke)
    return match.group(1) if match else None


def test_every_device_script_says_how_its_smoke_runs():
    for name in _scripts():
        caller = _run_by(_smoke(name))
        if caller is not None:
            with open(os.path.join(DEVICE, caller), encoding='utf-8') as f:
                assert name in f.read(), f'{name}: "run by {caller}", which does not name it'
            assert _run_by(_smoke(caller)) is None, f'{caller} has no smoke of its own'


SMOKES = [n for n in _scripts() if _run_by(_smoke(n)) is None]


@pytest.fixture(scope='module')
def smoke_builds(tmp_path_factory):
    shared = os.environ.get('LAMP_TEST_BUILDS')
    return os.path.join(shared, 'smoke') if shared else str(tmp_path_factory.mktemp('smoke'))


@pytest.mark.parametrize('name', SMOKES)
def test_the_device_script_runs_its_cpu_smoke(name, tmp_path, smoke_builds):
    with open(os.path.join(DEVICE, name), encoding='utf-8') as f:
        for module in NEEDS_LINE.findall(f.read()):
            pytest.importorskip(module, reason=f'{name} smoke needs {module}')
    env = {**os.environ, 'SMOKE': '1', 'OUT': str(tmp_path / 'out'), 'WORK': str(tmp_path),
           'SMOKE_BUILDS': smoke_builds, 'PYTHON': sys.executable,
           'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ['PATH']}
    done = subprocess.run(['bash', '-c', _smoke(name)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f'{name} smoke exit {done.returncode}:\n{output[-6000:]}'
    stops = re.findall(r'^smoke: stops before .*$', output, re.M)
    print(f'{name}: ' + ('; '.join(stops) if stops else 'ran to its end'))
