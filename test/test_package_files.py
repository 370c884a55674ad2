"""The package is a standard ament_python package and the README's two commands are CI's."""

import os
import re
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(path):
    with open(os.path.join(ROOT, path), encoding='utf-8') as f:
        return f.read()


def test_package_xml_format3_ament_python_with_runtime_deps():
    root = ET.fromstring(_read('package.xml'))
    assert root.get('format') == '3'
    assert root.findtext('name') == 'lamp_ros'
    assert root.find('export/build_type').text == 'ament_python'
    deps = {e.text for e in root.findall('exec_depend')}
    for dep in ('rclpy', 'lifecycle_msgs', 'sensor_msgs', 'std_msgs', 'trajectory_msgs',
                'diagnostic_msgs'):
        assert dep in deps, dep


def test_setup_registers_scripts_and_data_files():
    setup = _read('setup.py')
    assert "'lamp = lamp_ros.cli:main'" in setup
    assert "'vla_node = lamp_ros.node.vla_node:main'" in setup
    for fragment in ("'resource/' + package_name", "'package.xml'", "glob('launch/*.launch.py')",
                     "tree('config')"):
        assert fragment in setup, fragment
    cfg = _read('setup.cfg')
    assert 'script_dir=$base/lib/lamp_ros' in cfg
    assert 'install_scripts=$base/lib/lamp_ros' in cfg
    assert os.path.isfile(os.path.join(ROOT, 'resource', 'lamp_ros'))


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one():
    readme = _read('README.md')
    commands = re.findall(r'^(bash scripts/run\.sh \w+)', readme, re.M)
    assert commands[:2] == ['bash scripts/run.sh demo', 'bash scripts/run.sh test']
    assert 'exec bash scripts/run.sh test' in _read('.ci/run')


def test_dependencies_are_pinned():
    for line in _read('requirements.txt').splitlines():
        line = line.strip()
        if line and not line.startswith('#'):
            assert re.fullmatch(r'[A-Za-z0-9_.\-]+==[0-9][^ ]*', line), line
    assert 'torch==2.13.0' in _read('requirements.txt')


def test_artifacts_dir_is_ignored_but_documented():
    ignore = _read('.gitignore')
    assert '/artifacts/*' in ignore and '!/artifacts/README.md' in ignore
    assert os.path.isfile(os.path.join(ROOT, 'artifacts', 'README.md'))
