"""README.md: every command block, as written, from the root of a scratch copy of the
repository (doc_commands.py says how blocks run and what their markers mean)."""


def test_readme_commands_run_as_written(doc_run):
    doc_run.document('README.md')
