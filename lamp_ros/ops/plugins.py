"""Host operators defined outside lamp_ros: a policy's own glue, run on the robot.

A policy package registers its numpy glue with `ops.registry.host_op` in a module of its own.
The artifact cannot hold that code (plain data only: no pickles, no Python source), so it
pins it: per host group (plan.json `build.modules`), each glue module's name and the sha256 of
its source file, and every module of the policy's own package that importing the glue loads
(its helpers, the package's `__init__`), each with its sha256. The glue's entry lists those
under `imports`; theirs hold no operators. Loading the artifact imports the glue modules, so
their operators register again, and refuses, naming the module, when one is missing, when a
pinned module's source differs from the one the artifact was built and checked with, when the
glue now loads a module of its package that was not pinned, or when it pulls torch into a
process that runs without it (host operators run on the robot, where torch need not be
installed). The build refuses a glue that imports torch already, since every load would.

What the glue imports is measured, not guessed: a fresh interpreter imports the glue alone
(ops/glue_probe.py) and reports the package's modules then loaded. The build process cannot
say (it has imported the whole policy), and reading the import statements would miss
imports made by code (importlib, a package `__init__`, an import inside a function run at
import time) and could not tell a submodule from a name of the package.
"""

import hashlib
import importlib
import importlib.util
import json
import subprocess
import sys

from lamp_ros.ops.glue_probe import in_package, MARK, module_file
from lamp_ros.ops.registry import HOST_OPS

CORE = 'lamp_ros.ops.'  # the operators shipped with lamp_ros (registry.py and what it imports)
SHIPPED_POLICIES = 'lamp_ros.policies.'
PROBE_TIMEOUT_S = 300
REBUILD = 'restore that version or rebuild the artifact (lamp compile)'


class HostModuleError(ValueError):
    """A user host-operator module (or a module of its package it imports) is missing,
    changed since the build, or imports torch."""


def file_sha256(path: str) -> str:
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def source_sha256(module) -> str:
    return file_sha256(module_file(module))


def own_package(module: str) -> str:
    """The policy's own package of a glue module: its top-level package (`my_policy` for
    `my_policy.glue`), or for a policy shipped inside lamp_ros, `lamp_ros.policies.<name>`."""
    if module.startswith(SHIPPED_POLICIES):
        return '.'.join(module.split('.')[:3])
    return module.split('.')[0]


def user_modules(op_names) -> dict:
    """{module: {'sha256': its source's, 'ops': [names], 'imports': [pinned modules]}} for the
    ops of `op_names` that a module outside lamp_ros.ops registered (none for the core's own
    operators), and {'sha256', 'ops': []} for each module of the policy's package that a glue
    module loads. HostModuleError where a glue cannot be imported alone or imports torch."""
    out = {}
    for name in sorted(set(op_names)):
        op = HOST_OPS.get(name)
        if op is None or op.module.startswith(CORE):
            continue
        out.setdefault(op.module, {'sha256': source_sha256(sys.modules[op.module]),
                                   'ops': []})['ops'].append(name)
    for glue in sorted(out):
        pinned = {m: f for m, f in probe_glue(glue, out[glue]['ops']).items()
                  if f is not None and m != glue}
        out[glue]['imports'] = sorted(pinned)
        for module, path in pinned.items():
            out.setdefault(module, {'sha256': file_sha256(path), 'ops': []})
    return dict(sorted(out.items()))


def probe_glue(name: str, ops) -> dict:
    """{module of the glue's own package: its file} that importing glue module `name` alone in
    a fresh interpreter loads (ops/glue_probe.py); HostModuleError naming the module and the
    import where that fails or loads torch."""
    bootstrap = ('import json, sys; sys.path[:] = json.loads(sys.argv[1]); '
                 'from lamp_ros.ops.glue_probe import main; main(sys.argv[2], sys.argv[3])')
    try:
        done = subprocess.run([sys.executable, '-I', '-c', bootstrap, json.dumps(sys.path),
                               own_package(name), name], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise HostModuleError(f'host operators {", ".join(ops)}: importing module {name} alone '
                              f'took over {PROBE_TIMEOUT_S} s') from exc
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        raise HostModuleError(f'host operators {", ".join(ops)}: importing module {name} alone '
                              f'failed (exit {done.returncode}): {done.stderr[-1500:]}')
    report = json.loads(lines[-1][len(MARK):])
    if report.get('torch'):
        chain = ' -> '.join(f'{m} ({path}:{line})' for m, path, line in report['torch'])
        raise HostModuleError(
            f'host operators {", ".join(ops)}: module {name} imports torch: {chain} -> torch. '
            'Host operators run on the robot, whose runtime has no torch, so every load of '
            'the artifact would refuse it; keep torch in the policy\'s model code, out of the '
            'glue module and the modules of its package it imports')
    if 'error' in report:
        raise HostModuleError(
            f'host operators {", ".join(ops)}: module {name} cannot be imported on its own, as '
            f'the robot imports it ({report["error"]})')
    return report['modules']


def import_user_modules(modules: dict) -> None:
    """Import every recorded glue module (registering its operators) after checking that its
    source and that of every module of its package it loaded at build time are the ones the
    artifact was built with (so no changed code runs); HostModuleError naming the module
    otherwise."""
    for name, entry in sorted((n, e) for n, e in modules.items() if e.get('ops')):
        ops = ', '.join(entry['ops'])
        path = locate(name, f'host operators {ops}: module {name!r} cannot be imported',
                      'install the package that defines it, as it was when the artifact was '
                      'built')
        for module in entry.get('imports', ()):  # sorted: a package before its modules
            where = locate(module, f'host operators {ops}: module {module}, which {name} '
                                   'imported when the artifact was built, cannot be found',
                           REBUILD)
            check_source(where, modules[module]['sha256'],
                         f'host operators {ops}: module {module} (imported by {name})')
        check_source(path, entry['sha256'], f'host operators {ops}: module {name}')
        had_torch = 'torch' in sys.modules
        before = set(sys.modules)
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise HostModuleError(
                f'host operators {ops}: module {name!r} cannot be imported ({exc}); install the '
                'package that defines it, as it was when the artifact was built') from exc
        if not had_torch and 'torch' in sys.modules:
            raise HostModuleError(
                f'host operators {ops}: module {name} imports torch; host operators run on the '
                'robot without it (keep torch in the policy\'s model code, not in its glue)')
        if 'imports' in entry:  # pinned at build (older artifacts pinned the glue alone)
            extra = sorted(m for m in set(sys.modules) - before
                           if in_package(m, own_package(name)) and m not in modules
                           and module_file(sys.modules[m]) is not None)
            if extra:
                raise HostModuleError(
                    f'host operators {ops}: module {name} now imports {", ".join(extra)} of its '
                    'package, which the artifact was not built with; rebuild the artifact '
                    '(lamp compile)')
        missing = [op for op in entry['ops'] if op not in HOST_OPS]
        if missing:
            raise HostModuleError(f'host operators {missing}: module {name} no longer '
                                  'registers them')


def locate(name: str, what: str, fix: str) -> str:
    """The file module `name` would run from, found without running it (only the packages
    above it, checked before it); HostModuleError `what (why); fix` where there is none."""
    try:
        spec = importlib.util.find_spec(name)
    except ImportError as exc:
        raise HostModuleError(f'{what} ({exc}); {fix}') from exc
    if spec is None or not spec.has_location:
        raise HostModuleError(f'{what} (No module named {name!r}); {fix}')
    return spec.origin


def check_source(path: str, sha256: str, what: str) -> None:
    """HostModuleError unless the file at `path` has the pinned sha256."""
    got = file_sha256(path)
    if got != sha256:
        raise HostModuleError(
            f'{what} ({path}) changed since the build: its source has sha256 {got[:12]}, the '
            f'artifact was built and checked with {sha256[:12]}; {REBUILD}')
