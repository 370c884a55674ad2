"""The doc tests cover every document with commands, and every marker in them is understood
(a typo in a directive fails here, in a second, not after minutes of commands)."""

import glob
import os

from .conftest import REPO
from .doc_commands import command_blocks
from .test_bench_readme import BENCH_README
from .test_guide_commands import GUIDES as FIRST
from .test_more_guide_commands import GUIDES as SECOND

RUN = {'README.md', BENCH_README, *FIRST, *SECOND}


def _documents() -> list:
    return ['README.md', BENCH_README] + sorted(
        os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, 'docs', '*.md')))


def test_every_document_with_commands_is_run():
    with_commands = [d for d in _documents() if any(not b.file for b in command_blocks(d, REPO))]
    assert sorted(set(with_commands) - RUN) == [], 'add these to a test/docs module'
    assert sorted(RUN - set(_documents())) == []


def test_markers_parse_and_skips_say_why():
    for doc in _documents():
        for block in command_blocks(doc, REPO):  # raises on an unknown or malformed directive
            assert all(reason.strip() for reason in block.skip_lines.values())
