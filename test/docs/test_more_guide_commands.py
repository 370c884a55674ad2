"""docs/*.md, the second half (see test_guide_commands.py)."""

import pytest

GUIDES = ('docs/dataset.md', 'docs/own-policy.md', 'docs/policy.md', 'docs/precision.md',
          'docs/regression.md', 'docs/spec.md', 'docs/testing.md', 'docs/whitebox.md')


@pytest.mark.parametrize('doc', GUIDES)
def test_guide_commands_run_as_written(doc_run, doc):
    doc_run.document(doc)
