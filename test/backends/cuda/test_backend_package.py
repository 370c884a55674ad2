"""The cuda backend as get_backend hands it out (backends/cuda/__init__.py): the protocol's
names, the compile side's and run side's modules apart, and no torch imported with it, so that
a process that only asks for the backend (or loads a CPU artifact) stays free of torch."""

import ast
import importlib
import inspect
import subprocess
import sys


def test_the_backend_imports_without_torch_and_exposes_its_protocol():
    code = (
        'import sys\n'
        'from lamp_ros.backends import get_backend\n'
        'cuda = get_backend("cuda")\n'
        'names = ("NAME", "supports", "device_for", "compile", "load")\n'
        'assert all(hasattr(cuda, n) for n in names), names\n'
        'assert callable(cuda.compile)\n'
        'assert cuda.compile.__module__.endswith(".cuda.compile_side")\n'
        'assert cuda.load.__module__.endswith(".cuda.run_side")\n'
        'print("TORCH", sorted(m for m in sys.modules if m.split(".")[0] == "torch"))\n')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert 'TORCH []' in result.stdout, result.stdout


def test_neither_side_imports_the_other():
    for side, other in (('run_side', 'compile_side'), ('compile_side', 'run_side')):
        module = importlib.import_module(f'lamp_ros.backends.cuda.{side}')
        tree = ast.parse(inspect.getsource(module))
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert f'lamp_ros.backends.cuda.{other}' not in imported, side
