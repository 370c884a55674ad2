"""A spec as data to edit and write elsewhere: a bench's one-edit variants, a test's builds, a
user's copy in another folder.

A spec names files relative to its own folder (a robot file, a checkpoint, a tokenizer), so a
copy written into a temporary folder as it was read no longer finds them (`robot.file: cannot
read /tmp/x/../robots/sim7.yaml`). `spec_data` returns the data with those paths (keys.PATH_KEYS)
made absolute, and `write_spec` writes it; `edited_spec` parses an edited copy in memory, as if
it lay where the original does, with no file at all. The absolute paths are part of the copy's
spec, so its artifact id differs from the original's: a copy is another spec."""

import os

from lamp_ros.spec.build_options import read_yaml
from lamp_ros.spec.keys import PATH_KEYS
from lamp_ros.spec.model_spec import parse_spec, Spec


def spec_data(path: str) -> dict:
    """The spec file at `path` as data, every path it names absolute."""
    data = read_yaml(path, 'spec') or {}
    folder = os.path.dirname(os.path.abspath(path))
    for key in PATH_KEYS:
        *parents, name = key.split('.')
        section = data
        for part in parents:
            section = section.get(part) if isinstance(section, dict) else None
        if (isinstance(section, dict) and isinstance(section.get(name), str)
                and not os.path.isabs(section[name])):
            section[name] = os.path.normpath(os.path.join(folder, section[name]))
    return data


def write_spec(data: dict, path: str) -> str:
    """Write spec data (from spec_data, edited) as YAML at `path`; returns `path`."""
    import yaml
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return path


def edited_spec(path: str, edit) -> Spec:
    """The spec at `path` with `edit(data)` applied to a copy of its data, parsed as if it lay
    where the original does: its relative paths name the original's files."""
    data = read_yaml(path, 'spec') or {}
    edit(data)
    return parse_spec(data, source=path)
