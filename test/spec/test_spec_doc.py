"""docs/spec.md against the code: its table of spec keys is exactly the keys the parser (and the
control operators, and the shipped policies) accept, its table of specs names every file in
config/specs with its target, and the group counts it states are those of the built artifacts
(the session's fixtures: no build of its own)."""

from collections import Counter
from dataclasses import fields
import glob
import json
import os
import re

import pytest
import yaml

from lamp_ros.spec import parse_spec, SpecError
from lamp_ros.spec.keys import ROBOT_FILE, SPEC_KEYS
from lamp_ros.spec import spec_data

DOC = 'docs/spec.md'
BASE = 'config/specs/pi05_tiny_random.yaml'
ROBOT = 'config/robots/sim7.yaml'

# The specs the doc's group counts are checked on, by the session fixture that builds each. The
# others need a GPU (cuda) or a long precision plan (int8): their targets are checked only.
BUILT_BY = {'pi05_tiny.yaml': 'demo_artifact', 'pi05_tiny_random.yaml': 'tiny_artifact',
            'pi05_tiny_arm6.yaml': 'arm6_artifact', 'act_small.yaml': 'act_small_artifact',
            'point_reach.yaml': 'point_reach_artifact',
            'viperx_pick_place_random.yaml': 'world_random_artifact',
            'viperx_pick_place_demo.yaml': 'world_demo_artifact'}

# control.chunker / control.smoother keys that control_pipeline (lamp_ros/control.py) fills from
# the policy (its horizon, its joints) and from control.rate_hz: not the spec's to set.
FILLED_BY_THE_PIPELINE = {'horizon', 'joints', 'dt'}


def _doc() -> str:
    with open(DOC, encoding='utf-8') as f:
        return f.read()


def _table(text: str, header: str) -> list:
    """The rows (lists of cells) of the markdown table whose header line is `header`."""
    lines = text.splitlines()
    start = lines.index(header) + 2  # past the |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith('|'):
            break
        rows.append([cell.strip() for cell in re.split(r'(?<!\\)\|', line.strip())[1:-1]])
    assert rows, f'{DOC}: the table "{header}" has no rows'
    return rows


def _code(cell: str) -> str:
    (name,) = re.findall(r'`([^`]+)`', cell)
    return name


# ---- the keys ---------------------------------------------------------------------------------

def _parser_paths() -> set:
    """Every key of SPEC_KEYS as its full path, the mappings that hold other keys of the list
    left out (`stages`, `robot.joints`): the rows the doc's table has for the parser's keys."""
    paths = {f'{where}.{key}'.lstrip('.') for where, keys in SPEC_KEYS.items() for key in keys}
    paths.add(f'robot.{ROBOT_FILE}')
    holders = {p for p in paths
               if any(w == p or w.startswith((p + '.', p + '[')) for w in SPEC_KEYS if w)}
    return paths - holders


def _control_paths() -> set:
    """The keys of control.chunker (with rtc), control.smoother and control.clamp: the control
    operators' fields, as control_pipeline builds them from the spec."""
    from lamp_ros.ops.chunker import ActionChunker
    from lamp_ros.ops.clamp import SafetyClamp
    from lamp_ros.ops.rtc_config import RtcConfig
    from lamp_ros.ops.smoother import Smoother
    paths = set()
    for section, op in (('chunker', ActionChunker), ('smoother', Smoother),
                        ('clamp', SafetyClamp)):
        paths |= {f'control.{section}.{f.name}' for f in fields(op)
                  if f.name not in FILLED_BY_THE_PIPELINE}
    paths.remove('control.chunker.rtc')  # a mapping of its own
    return paths | {f'control.chunker.rtc.{f.name}' for f in fields(RtcConfig)}


def test_the_key_table_is_every_key_the_spec_accepts():
    documented = [_code(row[0]) for row in _table(_doc(), '| key | default | what |')]
    assert len(documented) == len(set(documented)), Counter(documented).most_common(3)
    accepted = (_parser_paths() - {'control.chunker', 'control.smoother', 'control.clamp'}
                | _control_paths())
    assert set(documented) - accepted == set(), 'documented, not accepted'
    assert accepted - set(documented) == set(), 'accepted, not documented'


def _with_every_mapping() -> dict:
    """pi05_tiny_random's spec with every mapping SPEC_KEYS lists present (an inline robot, a
    precision plan with budget and calibration)."""
    spec = spec_data(BASE)
    with open(ROBOT, encoding='utf-8') as f:
        spec['robot'] = yaml.safe_load(f)
    spec['precision'] = {'plan': 'manual', 'budget': {}, 'calibration': {}}
    return spec


def _mapping_at(spec: dict, where: str) -> dict:
    node = spec
    for part in where.split('.') if where else ():
        name = part.removesuffix('[]')
        node = node[{'<stage>': 'vision', '<slot>': 'base'}.get(name, name)]
        if part.endswith('[]'):
            node = node[0]
    return node


@pytest.mark.parametrize('where', sorted(SPEC_KEYS))
def test_the_parser_accepts_exactly_the_listed_keys(where):
    """Each mapping of SPEC_KEYS refuses a key it does not list, naming exactly the listed ones:
    the list is what the parser checks, so the doc test above holds for the parser itself."""
    spec = _with_every_mapping()
    parse_spec(spec, source=BASE)  # every listed key present where the base spec has it: fine
    _mapping_at(spec, where)['unlisted'] = 1
    with pytest.raises(SpecError) as err:
        parse_spec(spec, source=BASE)
    label = where.replace('[]', '[0]').replace('<stage>', 'vision').replace('<slot>', 'base')
    assert str(err.value) == (f'{label}.unlisted: unknown key; known: '
                              f'{", ".join(sorted(SPEC_KEYS[where]))}').lstrip('.')


def test_a_robot_file_is_the_one_key_of_its_form():
    spec = spec_data(BASE)
    assert spec['robot'] == {ROBOT_FILE: os.path.abspath(ROBOT)}
    assert parse_spec(spec, source=BASE).robot.name == 'sim7'


def _known_keys(error: SpecError) -> set:
    return set(str(error).split('known: ', 1)[1].split(', '))


def _pi05_option_keys() -> set:
    """pi0.5's policy.options as its entry function checks them, read from its refusals of an
    unknown key (no policy is built: the check comes first)."""
    from lamp_ros.policies.pi05.pipeline import pipeline_from_spec
    keys = set()
    for options, weights, prefix in (
            ({'unlisted': 1}, {'seed': 0}, ''),
            ({'preset': 'pi05_tiny', 'glue': {'unlisted': 1}}, {'seed': 0}, 'glue.'),
            ({'preset': 'from_weights', 'tokenizer': {'path': 'tokenizer.model', 'unlisted': 1}},
             {'format': 'lerobot', 'path': 'checkpoint'}, 'tokenizer.')):
        spec = parse_spec({'name': 'options', 'target': 'cpu', 'weights': weights,
                           'policy': {'entry': 'lamp_ros.policies.pi05.pipeline:'
                                               'pipeline_from_spec', 'options': options},
                           'control': {'clamp': {'lower': [0], 'upper': [1], 'max_step': 1}}})
        with pytest.raises(SpecError, match='unknown key') as err:
            pipeline_from_spec(spec)
        keys |= {prefix + key for key in _known_keys(err.value)}
    return keys - {'glue', 'tokenizer'}  # mappings, documented by their keys


def test_the_options_table_is_what_the_shipped_policies_accept():
    from lamp_ros.policies.act_small.policy import ActConfig
    from lamp_ros.policies.point_reach.policy import ReachConfig
    documented = {}
    for policy, option, *_ in _table(_doc(), '| policy | option | default | what |'):
        documented.setdefault(policy, []).append(_code(option))
    assert {p: sorted(o) for p, o in documented.items()} == {
        'pi0.5': sorted(_pi05_option_keys()),
        'act_small': sorted(f.name for f in fields(ActConfig)),
        'point_reach': sorted(f.name for f in fields(ReachConfig))}


def test_the_pass_table_is_pi05s_passes_in_run_order():
    from lamp_ros.policies.pi05.passes import APPROXIMATE, PASS_NAMES
    documented = [_code(row[0]) for row in _table(_doc(), '| pass | what |')]
    assert documented == list(PASS_NAMES)
    assert APPROXIMATE == ('fp8_prefix_mlp',)  # "All but fp8_prefix_mlp keep the outputs"


# ---- the specs and their groups ---------------------------------------------------------------

def _spec_rows() -> dict:
    return {_code(row[0]): row for row in _table(_doc(), '| spec | target | groups | used by |')}


def _stated_groups(cell: str) -> tuple:
    """'7: 6 host, 1 onnxruntime' -> (7, {'host': 6, 'onnxruntime': 1})."""
    total, parts = cell.split(':', 1)
    counts = {}
    for part in parts.split(','):
        n, backend = part.split()
        counts[backend] = int(n)
    assert sum(counts.values()) == int(total), cell
    return int(total), counts


def test_the_spec_table_names_every_shipped_spec_and_its_target():
    from lamp_ros.spec import BACKENDS_FOR_TARGET
    rows = _spec_rows()
    assert set(rows) == {os.path.basename(p) for p in glob.glob('config/specs/*.yaml')}
    for name, (_, target, groups, _used) in rows.items():
        with open(os.path.join('config/specs', name), encoding='utf-8') as f:
            assert _code(target) == yaml.safe_load(f)['target'], name
        _, counts = _stated_groups(groups)
        assert set(counts) <= set(BACKENDS_FOR_TARGET[_code(target)]), name


@pytest.mark.parametrize('name', sorted(BUILT_BY))
def test_the_stated_groups_are_those_of_the_build(name, request):
    artifact = request.getfixturevalue(BUILT_BY[name])
    with open(os.path.join(artifact, 'plan.json'), encoding='utf-8') as f:
        groups = json.load(f)['groups']
    total, counts = _stated_groups(_spec_rows()[name][2])
    assert (len(groups), dict(Counter(g['backend'] for g in groups))) == (total, counts)
    if name.startswith('pi05'):  # "one group holds the three model stages"
        assert [g['nodes'] for g in groups if g['backend'] != 'host'] == \
            [['vision', 'prefix', 'denoise']]
