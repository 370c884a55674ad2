"""What produced a results file: the command, the commit, the card (or the CPU), the torch version
and the date, as one plain mapping that a benchmark writes into its JSON (`"provenance": ...`).

A figure is only worth what is known of where it came from: the same script on another card,
or on code three commits older, is another figure. Nothing here imports torch (the runtime and
the node may record provenance too): its version comes from the installed package's metadata.
A device machine gets a copy of the working tree whose .git, if any, may be older than the files
(seen: the previous session's HEAD, "-dirty"), so a device call names its commit,
`LAMP_COMMIT=<hash> bash scripts/device/...`, which wins over git; it is only recorded, never
acted on."""

import datetime
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit() -> str:
    """LAMP_COMMIT where the run names its commit, else the checkout's (with `-dirty` when
    tracked files differ from it), else a sentence saying it is unknown. A named commit wins:
    a device machine's copy of the tree may carry an older .git than the files it runs."""
    named = os.environ.get('LAMP_COMMIT')
    if named:
        return named
    try:
        head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=ROOT, capture_output=True,
                              text=True, timeout=10)
        if head.returncode == 0:
            changed = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                                     cwd=ROOT, capture_output=True, text=True, timeout=10)
            return head.stdout.strip() + ('-dirty' if changed.stdout.strip() else '')
    except (OSError, subprocess.SubprocessError):
        pass
    return 'unknown: not a git checkout and no LAMP_COMMIT'


def cpu_name() -> str:
    """The CPU's model name and core count (Linux /proc/cpuinfo; platform's guess elsewhere)."""
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            model = next((line.split(':', 1)[1].strip() for line in f
                          if line.startswith('model name')), '')
    except OSError:
        model = ''
    return f'CPU: {model or platform.processor() or platform.machine()}, {os.cpu_count()} cores'


def gpu_name() -> str:
    """The first GPU's name from nvidia-smi (no torch import), or why there is none."""
    try:
        done = subprocess.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f'no GPU: nvidia-smi failed ({exc})'
    names = done.stdout.strip().splitlines()
    return names[0].strip() if done.returncode == 0 and names else 'no GPU: nvidia-smi found none'


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _this_command() -> list:
    """This process's command line as a user would type it, without this machine's paths: a
    console script (`lamp ...`) by its name, a script of this checkout relative to it."""
    script, *rest = sys.argv or ['']
    if os.path.isabs(script):
        if script.startswith(os.path.join(sys.prefix, '')):
            return [os.path.basename(script), *rest]
        if script.startswith(os.path.join(ROOT, '')):
            script = os.path.relpath(script, ROOT)
        else:
            script = os.path.basename(script)
    return [os.path.basename(sys.executable), script, *rest]


def provenance(device: str = 'cpu', command: list[str] | None = None) -> dict:
    """{command, commit, card, torch, python, date} of this run. `device`: where the figures were
    measured ('cpu', or 'cuda' for the GPU's name); `command`: the command line (this process's
    by default)."""
    argv = command if command is not None else _this_command()
    return {'command': shlex.join(argv),
            'commit': commit(),
            'card': cpu_name() if device == 'cpu' else gpu_name(),
            'torch': package_version('torch'),
            'python': platform.python_version(),
            'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}
