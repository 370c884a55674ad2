"""The doc tests' world: a scratch copy of the repository per document, the project's venv on
its PATH, and the suite's builds of the specs the docs compile (doc_commands.py)."""

import functools
import os
import sys

import pytest

from .doc_commands import DocRun, scratch_copy

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# specs the docs compile that the suite builds anyway: served from that build (same command)
SUITE_BUILDS = {'config/specs/pi05_tiny.yaml': 'demo_artifact',
                'config/specs/pi05_tiny_int8.yaml': 'int8_artifact',
                'config/specs/pi05_tiny_arm6.yaml': 'arm6_artifact',
                'config/specs/viperx_pick_place_random.yaml': 'world_random_artifact',
                'config/specs/viperx_pick_place_demo.yaml': 'world_demo_artifact'}
# bench/tiny_cpu.py's four builds (its EDITS of pi05_tiny_random.yaml), which the suite makes
# as its own (test/conftest.py: tiny_artifact, tiny_variant): bench/README.md's doc-test marker
# hands them to tiny_cpu.py as artifacts/tiny_cpu/<name> (`needs tiny_cpu/<name>`), and
# test/benchmarks/test_tiny_cpu.py checks that its edits are those variants' edits
TINY_CPU_BUILDS = {'pi05_tiny': None, 'no_text_lengths': 'one_length',
                   'no_passes': 'no_passes', 'prototype': 'prototype'}


def _tiny_cpu_build(request, variant):
    if variant is None:
        return request.getfixturevalue('tiny_artifact')
    return request.getfixturevalue('tiny_variant')(variant)


STAMPED = ('requirements.txt', 'constraints.txt', 'setup.py', 'setup.cfg', 'package.xml')


def _venv_is_current() -> bool:
    """Whether the venv was installed from these project files (scripts/run.sh's stamp). Else
    the docs' `bash scripts/run.sh ...` would reinstall the project, from the scratch copy, into
    the venv the copy links to: the suite's own venv, its lamp_ros then pointing at a copy that
    is deleted when the test ends."""
    import hashlib
    digest = hashlib.sha256()
    for name in STAMPED:
        with open(os.path.join(REPO, name), 'rb') as f:
            digest.update(f.read())
    try:
        with open(os.path.join(sys.prefix, '.lamp-install-stamp'), encoding='utf-8') as f:
            return f.read().strip() == digest.hexdigest()
    except OSError:
        return False


@pytest.fixture
def doc_run(request, tmp_path):
    """A DocRun in a fresh scratch copy; `doc_run.document('README.md')` runs a document.
    Its nodes get a ROS domain of their own: documents run side by side on the suite's
    parallel workers, and two vla_nodes in one domain would hear each other."""
    from conftest import claim_ros_domain
    if not _venv_is_current():
        pytest.fail(f'{sys.prefix} was installed from other project files than these: run '
                    f'`bash scripts/run.sh test ...` (it reinstalls first), not pytest alone',
                    pytrace=False)
    root = scratch_copy(REPO, str(tmp_path / 'repo'), sys.prefix)
    builds = {spec: functools.partial(request.getfixturevalue, fixture)
              for spec, fixture in SUITE_BUILDS.items()}
    builds.update({f'tiny_cpu/{name}': functools.partial(_tiny_cpu_build, request, variant)
                   for name, variant in TINY_CPU_BUILDS.items()})
    domain, lock = claim_ros_domain()
    run = DocRun(root, sys.prefix, builds, log=print)
    run.env['ROS_DOMAIN_ID'] = str(domain)
    try:
        yield run
    finally:
        run.close()
        lock.close()
