"""The launch file and config/vla.yaml. launch_ros is not installable from wheels: where it is
missing, the launch file is checked statically (its structure), else it is imported and run."""

import ast
import importlib.util

import pytest
import yaml

from load_script import load_script
from lamp_ros.node.params import check, PARAMETERS

LAUNCH = 'launch/vla.launch.py'


def test_config_sets_exactly_the_declared_parameters_with_valid_values():
    with open('config/vla.yaml') as f:
        params = yaml.safe_load(f)['vla_policy']['ros__parameters']
    assert set(params) == set(PARAMETERS)
    for name, value in params.items():
        default = PARAMETERS[name][0]
        assert type(value) is type(default), name
        assert check(name, value) == '', name


def test_launch_file_structure():
    tree = ast.parse(open(LAUNCH).read())
    functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert 'generate_launch_description' in functions
    calls = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.setdefault(node.func.id, []).append(
                {kw.arg: kw.value.value for kw in node.keywords
                 if isinstance(kw.value, ast.Constant)})
    (lifecycle,) = calls['LifecycleNode']
    assert lifecycle['package'] == 'lamp_ros' and lifecycle['executable'] == 'vla_node'
    assert lifecycle['name'] == 'vla_policy'
    declared = {args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, 'id', '') == 'DeclareLaunchArgument'
                for args in [node.args]}
    assert declared == {'artifact', 'params_file', 'cyclone_interop'}
    (interop,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and getattr(n.func, 'id', '') == 'SetEnvironmentVariable']
    assert interop.args[0].value == 'FASTDDS_DEFAULT_PROFILES_FILE'
    assert 'fastdds_interop.xml' in ast.unparse(interop.args[1])
    assert 'cyclone_interop' in ast.unparse(interop)  # only when asked for
    transitions = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and n.attr.startswith('TRANSITION_')}
    assert transitions == {'TRANSITION_CONFIGURE', 'TRANSITION_ACTIVATE'}
    (handler,) = calls['OnStateTransition']
    assert handler == {'start_state': 'configuring', 'goal_state': 'inactive'}


@pytest.mark.skipif(importlib.util.find_spec('launch_ros') is None,
                    reason='launch_ros is not available as a wheel; checked statically above')
def test_launch_file_imports_and_builds():
    module = load_script(LAUNCH)
    assert module.generate_launch_description().entities
