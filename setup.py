"""Standard ament_python setup: builds with `colcon build` and with `pip install -e .`."""

from glob import glob
import os

from setuptools import find_packages, setup

package_name = 'lamp_ros'


def tree(src):
    """Map every file below `src` to share/<pkg>/<same relative dir> for data_files."""
    entries = {}
    for path in glob(os.path.join(src, '**', '*'), recursive=True):
        if os.path.isfile(path):
            target = os.path.join('share', package_name, os.path.dirname(path))
            entries.setdefault(target, []).append(path)
    return sorted(entries.items())


setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*']),
    package_data={'lamp_ros': ['policies/*/assets/*', 'policies/*/assets/*/*',
                               'kernels/tiles/*.json']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        *tree('config'),
    ],
    install_requires=['setuptools'],
    # `lamp eval --ray ADDRESS` (lamp_ros/sim/ray_runner.py); requirements.txt installs it for
    # the tests
    extras_require={'ray': ['ray==2.58.0']},
    zip_safe=True,
    maintainer='lamp_ros maintainers',
    maintainer_email='maintainers@lamp-ros.invalid',
    description='Pipeline compiler and embedded runtime for robot VLA policies on ROS 2.',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={
        'console_scripts': [
            'lamp = lamp_ros.cli:main',
            'vla_node = lamp_ros.node.vla_node:main',
        ],
        # Checkpoint formats `lamp import` reads: format name -> an object with
        # detect(folder) -> bool and run(folder, tokenizer, ...) (a policy package adds its own).
        'lamp_ros.checkpoint_formats': [
            'lerobot = lamp_ros.policies.pi05.checkpoint.importer:LEROBOT',
            'openpi = lamp_ros.policies.pi05.checkpoint.importer:OPENPI',
        ],
    },
)
