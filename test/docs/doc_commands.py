"""Every command block of the user docs, run as written from the root of a scratch copy of the
repository (test/docs/test_*.py run it per document).

A command block is a fence with no language, or `sh` / `bash`. Each line (a trailing `\\` joins
the next) runs in bash from the copy's root, with the project's venv first on PATH, as a user
who activated it would; a non-zero exit fails the test with the document, the line, and the
command's output. Blocks of output are fenced as `text` and not run. A block fenced with
`file=PATH` (```python file=my_policy/glue.py) is a file the reader is told to write: it is
written at PATH, in document order, before the commands after it run.

Some commands run until stopped, and the test knows them by name: `vla_node` and `lamp sim`
keep running in the background until the document's end (the next line runs once they say they
are up), a `lamp top` live view runs for a few seconds, and `ros2 ...` is not run here (no ROS 2
install: ros2 and launch are not among the wheels).

What else the reader does not see and the test needs is said in an HTML comment on the line
before the fence, `<!-- doc-test: DIRECTIVE; DIRECTIVE ... -->`:

- `skip: REASON`: the block is not run (a GPU, a ROS 2 install, the suite itself); the reason
  is printed with the test's result.
- `skip PREFIX: REASON`: lines that start with PREFIX are not run (PREFIX$: the whole command;
  commands are compared without their trailing `# comment` and with single spaces).
- `set OLD => NEW`: text replaced in every line of the block before it runs: a placeholder
  (`CKPT_DIR`) by a real path, or a size by a smoke size (`--episodes 50` by `--episodes 1`).
- `background PREFIX until TEXT`: lines that start with PREFIX keep running (a node, a
  simulated robot) until the document's end; the next line runs once their output holds TEXT.
- `for SECONDS PREFIX`: a line that runs until stopped (a live view, an 8-minute training run)
  passes if it is still running, or exited 0, after SECONDS.
- `needs NAME, NAME`: what the block expects to be there: `node` (vla_node running
  artifacts/pi05_tiny), `sim` (lamp sim of it), or an artifact `artifacts/NAME`;
  `without NAME`: `node` or `sim` stopped before the block.
- `exit CODE PREFIX`: the exit status lines that start with PREFIX are documented to end with
  (`lamp replay --against` finding a divergence: 1).

Compiling is the expensive part, and the suite builds the specs the docs compile anyway
(test/conftest.py: shared_build runs `lamp compile SPEC --out DIR` once per run): a
`lamp compile SPEC --out DIR` line of such a spec, and `needs NAME` of its artifact, are served
from that build, copied to DIR. So are other builds the suite makes that a command can be handed
(`needs tiny_cpu/pi05_tiny`: bench/tiny_cpu.py's, test/docs/conftest.py). Every other line runs.
"""

from dataclasses import dataclass, field
import os
import re
import shutil
import signal
import subprocess
import time

FENCE = re.compile(r'^```(\w*)(.*)$')
MARKER = re.compile(r'<!--\s*doc-test:(.*?)-->', re.S)
COMMAND_LANGS = ('', 'sh', 'bash')
COMPILE = re.compile(r'^(?:\.venv/bin/)?lamp compile (config/specs/[\w.-]+\.yaml) --out (\S+)\s*'
                     r'(?:#.*)?$')
COMMAND_TIMEOUT_S = 600
READY_TIMEOUT_S = 180
LIVE_VIEW_S = 5.0
# commands known by name (after a venv path or VAR=value prefix): what the test does with them
SERVERS = {'vla_node': r'activating|unconfigured, waiting', 'lamp sim': r'simulating '}
ONE_SHOT = ('--configure', '--activate', '--deactivate', '--cleanup', '--hold', '--resume',
            '--state', '--once', '--help', '-h')
# what `needs node` / `needs sim` start
WORLD = {'node': ('vla_node --ros-args -p artifact:=artifacts/pi05_tiny -p autostart:=true',
                  'vla_node'),
         'sim': ('lamp sim --ros-args -p artifact:=artifacts/pi05_tiny', 'lamp sim')}
NO_ROS_INSTALL = 'needs a ROS 2 install (ros2 and launch are not among the wheels)'


@dataclass
class Block:
    doc: str
    line: int                  # of the opening fence, 1-based
    lines: list                # the commands, continuations joined (the text of a file)
    file: str = ''             # a file block: its path
    skip: str = ''             # the whole block's reason
    skip_lines: dict = field(default_factory=dict)      # prefix -> reason
    sets: list = field(default_factory=list)            # [(old, new)]
    background: dict = field(default_factory=dict)      # prefix -> ready text
    timed: dict = field(default_factory=dict)           # prefix -> seconds
    needs: list = field(default_factory=list)
    without: list = field(default_factory=list)
    exits: dict = field(default_factory=dict)           # prefix -> expected exit status


def _directives(block: Block, text: str) -> None:
    for part in (p.strip() for p in text.split(';')):
        if not part:
            continue
        if part.startswith('skip'):
            head, _, reason = part.partition(':')
            prefix = head[len('skip'):].strip()
            if not reason.strip():
                raise ValueError(f'{block.doc}:{block.line}: skip without a reason: {part!r}')
            if prefix:
                block.skip_lines[prefix] = reason.strip()
            else:
                block.skip = reason.strip()
        elif part.startswith('set '):
            old, arrow, new = part[len('set '):].partition('=>')
            if not arrow:
                raise ValueError(f'{block.doc}:{block.line}: set OLD => NEW: {part!r}')
            block.sets.append((old.strip(), new.strip()))
        elif part.startswith('background '):
            prefix, until, ready = part[len('background '):].partition(' until ')
            if not until:
                raise ValueError(f'{block.doc}:{block.line}: background PREFIX until TEXT')
            block.background[prefix.strip()] = re.escape(ready.strip().strip('"'))
        elif part.startswith('for '):
            seconds, _, prefix = part[len('for '):].partition(' ')
            block.timed[prefix.strip()] = float(seconds)
        elif part.startswith('needs '):
            block.needs += [n.strip() for n in part[len('needs '):].split(',') if n.strip()]
        elif part.startswith('without '):
            block.without += [n.strip() for n in part[len('without '):].split(',')
                              if n.strip()]
        elif part.startswith('exit '):
            code, _, prefix = part[len('exit '):].partition(' ')
            block.exits[prefix.strip()] = int(code)
        else:
            raise ValueError(f'{block.doc}:{block.line}: unknown doc-test directive {part!r}')


def command_blocks(doc: str, root: str) -> list:
    """The command blocks of `doc` (a path relative to `root`), with their directives."""
    with open(os.path.join(root, doc), encoding='utf-8') as f:
        text = f.read()
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        lang, start = match.group(1), i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith('```'))
        i = end + 1
        info = match.group(2).strip()
        if info.startswith('file='):
            blocks.append(Block(doc, start + 1, lines[start + 1:end], file=info[len('file='):]))
            continue
        if lang not in COMMAND_LANGS or info:
            continue
        block = Block(doc, start + 1, _joined(lines[start + 1:end]))
        before = '\n'.join(lines[max(0, start - 12):start])
        marker = MARKER.findall(before)
        if marker and before.rstrip().endswith('-->'):
            _directives(block, marker[-1])
        blocks.append(block)
    return blocks


def _joined(lines) -> list:
    out, pending = [], ''
    for line in lines:
        if line.rstrip().endswith('\\'):
            pending += line.rstrip()[:-1] + ' '
            continue
        line = pending + line
        pending = ''
        if line.strip() and not line.lstrip().startswith('#'):
            out.append(line.strip())
    return out


def command_name(line: str) -> str:
    """The command itself: without leading VAR=value assignments and a venv bin path."""
    words = line.split()
    while words and re.match(r'^[A-Za-z_][A-Za-z0-9_]*=', words[0]):
        words = words[1:]
    rest = ' '.join(words)
    return rest[len('.venv/bin/'):] if rest.startswith('.venv/bin/') else rest


def default_kind(line: str):
    """('skip', reason), ('background', ready regex), ('for', seconds) or None, by name."""
    name = command_name(line)
    if name.startswith('ros2 '):
        return 'skip', NO_ROS_INSTALL
    for server, ready in SERVERS.items():
        if name == server or name.startswith(server + ' '):
            return 'background', ready
    if name.split('#')[0].split()[:2] == ['lamp', 'top'] and \
            not any(flag in name.split() for flag in ONE_SHOT):
        return 'for', LIVE_VIEW_S
    return None


def scratch_copy(root: str, dest: str, venv: str) -> str:
    """The repository's tracked and untracked-but-not-ignored files copied to `dest` (what a
    fresh clone of this working tree holds), with `.venv` linked to the project's venv."""
    files = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
                           cwd=root, capture_output=True, check=True).stdout.split(b'\0')
    for rel in (f.decode() for f in files if f):
        src = os.path.join(root, rel)
        if not os.path.isfile(src):
            continue  # deleted in the working tree, still in the index
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(src, target)
    os.symlink(venv, os.path.join(dest, '.venv'))
    return dest


class DocRun:
    """Runs the blocks of one document in the scratch copy; keeps its background processes
    until `close`. `builds`: spec path -> a function returning the suite's build of it."""

    def __init__(self, root: str, venv: str, builds: dict, log):
        self.root, self.builds, self.log = root, builds, log
        self.env = dict(os.environ, PATH=f'{venv}/bin:{os.environ["PATH"]}',
                        AMENT_PREFIX_PATH=venv, PYTHONPATH=root, PYTHONUNBUFFERED='1',
                        COLUMNS='120')
        self.running = []    # (line, Popen, log path)
        self.skipped = []    # (where, reason)

    # ---- world pieces --------------------------------------------------------------------

    def artifact(self, name: str) -> str:
        """artifacts/NAME from the suite's build of config/specs/NAME.yaml, or from the build
        `builds` names NAME itself (bench/tiny_cpu.py's, `tiny_cpu/<build>`)."""
        out = os.path.join(self.root, 'artifacts', name)
        if not os.path.isdir(out):
            spec = f'config/specs/{name}.yaml'
            build = self.builds.get(spec) or self.builds.get(name)
            if build is None:
                raise ValueError(f'needs {name}: no build of {spec} in the suite')
            shutil.copytree(build(), out)
        return out

    def need(self, name: str, where: str) -> None:
        if name in WORLD:
            self.artifact('pi05_tiny')
            line, server = WORLD[name]
            self.start(line, SERVERS[server], where)
        else:
            self.artifact(name)

    # ---- running -------------------------------------------------------------------------

    def run_block(self, block: Block) -> None:
        where = f'{block.doc}:{block.line}'
        if block.file:
            path = os.path.join(self.root, block.file)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w', encoding='utf-8') as f:
                f.write('\n'.join(block.lines) + ('\n' if block.lines else ''))
            return
        if block.skip:
            self.skipped.append((where, block.skip))
            return
        for name in block.without:
            self.stop(WORLD[name][0])
        for name in block.needs:
            self.need(name, where)
        for line in block.lines:
            for old, new in block.sets:
                line = line.replace(old, new)
            self._check_background(where)
            reason = _matching(block.skip_lines, line)
            ready = _matching(block.background, line)
            seconds = _matching(block.timed, line)
            kind = default_kind(line)
            if reason is None and ready is None and seconds is None and kind is not None:
                reason, ready, seconds = (kind[1] if kind[0] == k else None
                                          for k in ('skip', 'background', 'for'))
            if reason:
                self.skipped.append((f'{where} {line}', reason))
                continue
            if ready is not None:
                self.start(line, ready, where)
            elif seconds is not None:
                self.run_for(line, seconds, where)
            elif not self._served(line, where):
                self.run(line, where, _matching(block.exits, line) or 0)

    def _served(self, line: str, where: str) -> bool:
        match = COMPILE.match(line)
        if not match or match.group(1) not in self.builds:
            return False
        out = os.path.join(self.root, match.group(2))
        if os.path.exists(out):
            shutil.rmtree(out)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copytree(self.builds[match.group(1)](), out)
        self.log(f'{where}: {line}: the suite\'s build of {match.group(1)}, copied')
        return True

    def run(self, line: str, where: str, expected: int = 0) -> None:
        self.log(f'{where}: {line}')
        done = subprocess.run(['bash', '-c', line], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        if done.returncode != expected:
            raise AssertionError(f'{where}: `{line}` exited {done.returncode} (documented: '
                                 f'{expected})\n--- stdout ---\n{done.stdout[-3000:]}\n'
                                 f'--- stderr ---\n{done.stderr[-3000:]}')

    def _spawn(self, line: str):
        log = os.path.join(self.root, f'.doc_test_{len(self.running)}.log')
        with open(log, 'w') as out:
            proc = subprocess.Popen(['bash', '-c', line], cwd=self.root,
                                    env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        return proc, log

    def start(self, line: str, ready: str, where: str) -> None:
        """`line` in the background until the document's end, once its output holds `ready`.
        It replaces a running command of the same name (a second vla_node, as in one shell)."""
        if any(line == running for running, _, _ in self.running):
            return
        name = _server(line)
        for running in [r for r, _, _ in self.running if name and _server(r) == name]:
            self.stop(running)
        self.log(f'{where}: {line} (in the background)')
        proc, log = self._spawn(line)
        self.running.append((line, proc, log))
        end = time.monotonic() + READY_TIMEOUT_S
        while not re.search(ready, _read(log)):
            if proc.poll() is not None:
                raise AssertionError(f'{where}: `{line}` exited {proc.returncode} before it said '
                                     f'{ready!r}\n{_read(log)[-3000:]}')
            if time.monotonic() > end:
                raise AssertionError(f'{where}: `{line}` did not say {ready!r} in '
                                     f'{READY_TIMEOUT_S} s\n{_read(log)[-3000:]}')
            time.sleep(0.1)

    def run_for(self, line: str, seconds: float, where: str) -> None:
        self.log(f'{where}: {line} (for {seconds:g} s)')
        proc, log = self._spawn(line)
        try:
            rc = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            rc = 0  # still running, as it should
        finally:
            _stop(proc)
        if rc != 0:
            raise AssertionError(f'{where}: `{line}` exited {rc} within {seconds:g} s\n'
                                 f'{_read(log)[-3000:]}')

    def _check_background(self, where: str) -> None:
        for line, proc, log in self.running:
            if proc.poll() is not None:
                raise AssertionError(f'{where}: the background `{line}` exited {proc.returncode}'
                                     f'\n{_read(log)[-3000:]}')

    def document(self, doc: str) -> None:
        """Every command block of `doc`, in order; then the background processes stop."""
        try:
            for block in command_blocks(doc, self.root):
                self.run_block(block)
        finally:
            self.close()
        for where, reason in self.skipped:
            self.log(f'skipped {where}: {reason}')

    def stop(self, line: str) -> None:
        """Stop the background `line` (a `without` directive)."""
        for entry in [e for e in self.running if e[0] == line]:
            _stop(entry[1])
            self.running.remove(entry)

    def close(self) -> None:
        for _, proc, _ in reversed(self.running):
            _stop(proc)
        self.running = []


def _server(line: str) -> str | None:
    command = command_name(line)
    return next((s for s in SERVERS if command == s or command.startswith(s + ' ')), None)


def _matching(rules: dict, line: str):
    """The value of the rule whose PREFIX (PREFIX$: the whole command) the line starts with."""
    command = ' '.join(line.split('#')[0].split())
    for prefix, value in rules.items():
        exact = prefix.endswith('$')
        if (command == prefix[:-1]) if exact else command.startswith(prefix):
            return value
    return None


def _read(path: str) -> str:
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read()


def _stop(proc) -> None:
    """Ctrl-C to the process group, as in a terminal; killed if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
