"""docs/*.md: every command block of each guide, as written, from the root of a scratch copy of
the repository (doc_commands.py says how blocks run and what their markers mean). Split in two
modules so that the suite's parallel phase runs them on two workers."""

import pytest

GUIDES = ('docs/artifact.md', 'docs/checkpoints.md', 'docs/dataset.md', 'docs/dds_interop.md',
          'docs/demo-policy.md', 'docs/evaluation.md', 'docs/gpu.md', 'docs/node.md')


@pytest.mark.parametrize('doc', GUIDES)
def test_guide_commands_run_as_written(doc_run, doc):
    doc_run.document(doc)
