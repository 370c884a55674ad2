"""A script of the project (scripts/, scripts/device/, launch/) as a module, for tests of its
Python side: scripts are files, not packages, so they are loaded by path."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(*path: str):
    """load_script('scripts', 'update_tile_cache.py') -> the module, named after the file."""
    name = os.path.splitext(os.path.basename(path[-1]))[0].replace('.', '_')
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
