"""Host operators defined outside lamp_ros: a policy's own glue, run on the robot.

A policy package registers its numpy glue with `ops.registry.host_op` in a module of its own.
The artifact cannot hold that code (plain data only: no pickles, no Python source), so it
records, per host group (plan.json `build.modules`), each such module's name and the sha256 of
its source file. Loading the artifact imports those modules, so their operators register
again, and refuses, naming the module, when one is missing, when its source differs from the
one the artifact was built and checked with, or when it pulls torch into a process that runs
without it (host operators run on the robot, where torch need not be installed).
"""

import hashlib
import importlib
import inspect
import sys

from lamp_ros.ops.registry import HOST_OPS

CORE = 'lamp_ros.ops.'  # the operators shipped with lamp_ros (registry.py and what it imports)


class HostModuleError(ValueError):
    """A user host-operator module is missing, changed since the build, or imports torch."""


def source_sha256(module) -> str:
    path = inspect.getsourcefile(module)
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def user_modules(op_names) -> dict:
    """{module: {'sha256': its source's, 'ops': [names]}} for the ops of `op_names` that a
    module outside lamp_ros.ops registered (none for the core's own operators)."""
    out = {}
    for name in sorted(set(op_names)):
        op = HOST_OPS.get(name)
        if op is None or op.module.startswith(CORE):
            continue
        entry = out.setdefault(op.module, {'sha256': source_sha256(sys.modules[op.module]),
                                           'ops': []})
        entry['ops'].append(name)
    return out


def import_user_modules(modules: dict) -> None:
    """Import every recorded module (registering its operators) and check it is the one the
    artifact was built with; HostModuleError naming the module otherwise."""
    for name, entry in sorted(modules.items()):
        ops = ', '.join(entry.get('ops', ()))
        had_torch = 'torch' in sys.modules
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise HostModuleError(
                f'host operators {ops}: module {name!r} cannot be imported ({exc}); install the '
                'package that defines it, as it was when the artifact was built') from exc
        got = source_sha256(module)
        if got != entry['sha256']:
            raise HostModuleError(
                f'host operators {ops}: module {name} ({inspect.getsourcefile(module)}) changed '
                f'since the build: its source has sha256 {got[:12]}, the artifact was built and '
                f'checked with {entry["sha256"][:12]}; restore that version or rebuild the '
                'artifact (lamp compile)')
        if not had_torch and 'torch' in sys.modules:
            raise HostModuleError(
                f'host operators {ops}: module {name} imports torch; host operators run on the '
                'robot without it (keep torch in the policy\'s model code, not in its glue)')
        missing = [op for op in entry.get('ops', ()) if op not in HOST_OPS]
        if missing:
            raise HostModuleError(f'host operators {missing}: module {name} no longer '
                                  'registers them')
