"""Progress of a long command, on a terminal and in a log alike.

rich's status spinner draws only on a terminal: a log, a pipe or CI sees nothing for the minute
a compile takes and cannot tell a slow step from a hung one. Every step is therefore also a
timed line, on stderr, so that a command's `--json` output on stdout stays clean.
"""

from contextlib import contextmanager
import time


@contextmanager
def progress_lines(title: str):
    """`with progress_lines('compiling') as say: ... say('step')`: a timed line per step and,
    on a terminal, the spinner's text."""
    from rich.console import Console
    console = Console(stderr=True)
    start = time.perf_counter()
    with console.status(title) as status:
        def say(message: str) -> None:
            console.print(f'[dim]{time.perf_counter() - start:7.1f}s[/] {message}',
                          highlight=False)
            status.update(message)
        yield say
