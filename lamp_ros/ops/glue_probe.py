"""What a glue module pulls in when it is imported alone, as the robot imports it.

The build process cannot tell: it has already imported the whole policy (its model code, torch)
before the host backend records the glue, so its `sys.modules` says nothing about what the glue
itself needs. ops/plugins.py therefore runs `main` in a fresh interpreter with the build's
`sys.path`: it imports the glue module and nothing else, watches for an import of torch (and
records the chain of module imports that led to it), and reports the modules of the policy's own
package that are then loaded, with their files. That is the exact set the robot will execute, so
it is what the artifact pins; the same run tells whether loading the glue would pull in torch.

This module imports only the standard library, so nothing is loaded before the glue but what
the glue loads.
"""

import importlib
import json
import sys

MARK = 'LAMP_GLUE_PROBE '  # the report's line on stdout (the glue may print too)
WATCHED = 'torch'


class ImportWatch:
    """A meta path finder that finds nothing: on the first import of WATCHED it records the
    module-level code that was running (outermost first) as (module, file, line)."""

    def __init__(self):
        self.chain = None

    def find_spec(self, fullname, path=None, target=None):
        if fullname == WATCHED and self.chain is None:
            self.chain = importing_frames(sys._getframe(1))
        return None


def importing_frames(frame) -> list:
    """[(module, file, line)] of the import statements on the stack, outermost first: the
    top-level code of each module being imported, and the innermost function that imports
    (where the import sits inside one)."""
    out = []
    while frame is not None:
        code, name = frame.f_code, frame.f_globals.get('__name__', '?')
        frozen = code.co_filename.startswith('<frozen') or name.startswith('importlib')
        if not frozen and name not in ('__main__', __name__) and (
                code.co_name == '<module>' or not out):
            where = name if code.co_name == '<module>' else f'{name}.{code.co_name}'
            out.append((where, code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return out[::-1]


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + '.')


def module_file(module) -> str | None:
    """The file a module runs from: its source where it has one (what the artifact pins), else
    the file it was loaded from (an extension module); None for a namespace package."""
    import inspect
    try:
        return inspect.getsourcefile(module) or getattr(module, '__file__', None)
    except TypeError:  # a built-in module
        return None


def main(package: str, name: str) -> None:
    """Import `name` alone and print the report: {'modules': {module of `package`: file},
    'torch': the import chain that loaded torch, or None} or {'error': why it failed}."""
    watch = ImportWatch()
    sys.meta_path.insert(0, watch)
    try:
        importlib.import_module(name)
    except BaseException as exc:  # the glue's own failure, reported, not a crash of the probe
        report = {'error': f'{type(exc).__name__}: {exc}', 'torch': watch.chain}
    else:
        report = {'modules': {m: module_file(mod) for m, mod in list(sys.modules.items())
                              if in_package(m, package)},
                  'torch': watch.chain}
    print(MARK + json.dumps(report), flush=True)
