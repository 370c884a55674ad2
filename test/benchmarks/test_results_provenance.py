"""Every file under bench/results/ says what produced it: the command, the commit, the card (or
the CPU), the torch version and the date (lamp_ros/provenance.py writes them).

A results JSON holds its own top-level "provenance"; a file that cannot (a picture, a log, a
gzipped trace) is listed in bench/results/PROVENANCE.json with its provenance or the results
JSON of the same run whose provenance covers it. So a new results file that comes without
provenance fails here, and so does an entry that names a file no longer there."""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / 'bench' / 'results'
INDEX = RESULTS / 'PROVENANCE.json'
KEYS = ('command', 'commit', 'card', 'torch', 'date')


def _files() -> list[str]:
    return sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob('*')
                  if p.is_file() and p != INDEX)


def _own(name: str) -> dict | None:
    """A results JSON's own provenance (None for any other file)."""
    if not name.endswith('.json'):
        return None
    data = json.loads((RESULTS / name).read_text(encoding='utf-8'))
    return data.get('provenance') if isinstance(data, dict) else None


def _missing(provenance) -> list[str]:
    """The keys a provenance lacks or leaves empty."""
    if not isinstance(provenance, dict):
        return list(KEYS)
    return [k for k in KEYS if not (isinstance(provenance.get(k), str) and provenance[k].strip())]


@pytest.fixture(scope='module')
def index() -> dict:
    return json.loads(INDEX.read_text(encoding='utf-8'))['files']


def test_every_results_file_says_what_produced_it(index):
    bare = [name for name in _files() if _own(name) is None and name not in index]
    assert not bare, f'results files without provenance (a "provenance" key, or an entry in ' \
                     f'{INDEX.name}): {bare}'


def test_every_provenance_has_command_commit_card_torch_and_date(index):
    incomplete = {}
    for name in _files():
        own = _own(name)
        if own is not None:
            incomplete[name] = _missing(own)
        elif isinstance(index.get(name), dict):
            incomplete[name] = _missing(index[name])
    incomplete = {name: keys for name, keys in incomplete.items() if keys}
    assert not incomplete, f'provenance without (or with empty) keys: {incomplete}'


def test_the_index_names_only_files_there_and_points_at_results_that_hold_provenance(index):
    for name, entry in index.items():
        assert (RESULTS / name).is_file(), f'{INDEX.name} names {name}, which is not there'
        assert _own(name) is None, f'{name} holds its own provenance; drop its index entry'
        if isinstance(entry, str):
            assert _own(entry) is not None, \
                f'{name} points at {entry}, which holds no provenance'
        else:
            assert isinstance(entry, dict), f'{name}: a provenance or a results JSON\'s name'


def test_a_recorded_command_holds_no_path_of_this_machine(monkeypatch):
    """A console script is recorded by its name, a script of the checkout relative to it."""
    import os
    import sys

    from lamp_ros.provenance import provenance, ROOT
    monkeypatch.setattr(sys, 'argv', [os.path.join(sys.prefix, 'bin', 'lamp'), 'eval', 'A'])
    assert provenance()['command'] == 'lamp eval A'
    monkeypatch.setattr(sys, 'argv', [os.path.join(ROOT, 'bench', 'world_cost.py'), '--ticks',
                                      '5'])
    assert provenance()['command'].endswith(' bench/world_cost.py --ticks 5')
    assert ROOT not in provenance()['command']
