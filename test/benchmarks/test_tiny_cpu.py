"""bench/tiny_cpu.py refuses builds it cannot compare, and builds the suite's variants. Its run
itself, as bench/README.md says, on the suite's builds of those variants, is
test/docs/test_bench_readme.py."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'bench', 'tiny_cpu.py')


def test_unknown_or_incomplete_builds_are_refused(tmp_path):
    env = {**os.environ, 'PYTHONPATH': ROOT}
    done = subprocess.run([sys.executable, SCRIPT, '--artifact', 'no_passes=x'], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and 'pi05_tiny included' in done.stderr


def test_its_builds_are_the_suites_variants(tmp_path, monkeypatch):
    """bench/README.md's doc test hands tiny_cpu.py the suite's builds instead of its own
    (test/docs/conftest.py TINY_CPU_BUILDS): build() compiles SPEC with each of its EDITS,
    parsed where SPEC lies, as the suite's tiny_variant compiles its variant of the same edit
    (test/conftest.py VARIANT_EDITS): the same spec, so the same artifact."""
    from conftest import TINY_SPEC, VARIANT_EDITS
    from docs.conftest import TINY_CPU_BUILDS

    from bench import tiny_cpu
    from lamp_ros.compiler import build as compiler
    from lamp_ros.spec import edited_spec
    assert tiny_cpu.SPEC == TINY_SPEC and set(TINY_CPU_BUILDS) == set(tiny_cpu.EDITS)
    compiled = {}

    def compile_spec(spec, out, progress=None):
        compiled[os.path.basename(out)] = spec
        return type('Result', (), {'root': out})

    monkeypatch.setattr(compiler, 'compile_spec', compile_spec)
    paths = tiny_cpu.build(tiny_cpu.EDITS, str(tmp_path))
    assert paths == {name: str(tmp_path / name) for name in tiny_cpu.EDITS}
    for name, variant in TINY_CPU_BUILDS.items():
        suite = edited_spec(TINY_SPEC, VARIANT_EDITS[variant] if variant else lambda s: None)
        assert compiled[name].source == suite.source == TINY_SPEC, name
        assert compiled[name].to_dict() == suite.to_dict(), name
