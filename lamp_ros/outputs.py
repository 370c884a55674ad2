"""Where a command writes its results: checked before the long work starts.

A 50-episode evaluation that ends in "no such folder" has lost its results; every command that
writes a file therefore makes the folder and checks it can write there first.
"""

import os


def output_path(path: str, flag: str) -> str:
    """`path`, its folder created and checked writable: a command checks where it will write
    before its long work, so a missing or read-only folder never loses the results."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise ValueError(f'{flag} {path}: cannot create the folder {folder} ({exc.strerror})')
    if os.path.isdir(path):
        raise ValueError(f'{flag} {path}: is a folder; give a file name')
    if not os.access(folder, os.W_OK):
        raise ValueError(f'{flag} {path}: the folder {folder} is not writable')
    return path
