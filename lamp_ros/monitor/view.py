"""What `lamp top` draws: the node's /diagnostics status (values as node/diagnostics.py names
them) and its profile array (PROFILE_LAYOUT), as rich tables for a terminal, or as one line
for a log."""

import math
import time

from rich.console import Group
from rich.table import Table
from rich.text import Text

from lamp_ros.node.diagnostics import LEVELS, PROFILE_LAYOUT

LEVEL_NAMES = {code: name for name, code in LEVELS.items()}
STYLES = {'OK': 'green', 'WARN': 'yellow', 'ERROR': 'red', 'STALE': 'magenta'}
STATUS_STALE_S = 3.0   # the node reports every second: older than this, it no longer does
RATE_KEYS = ('achieved_rate_hz', 'target_rate_hz', 'tick_p50_ms', 'tick_p99_ms',
             'inference_p50_ms', 'inference_p99_ms', 'e2e_latency_p50_ms', 'e2e_latency_p99_ms')
COUNT_KEYS = ('commands_published', 'deadline_misses', 'skipped_ticks', 'stale_ticks',
              'rejected_messages', 'last_rejection', 'inference_errors', 'last_fault', 'held',
              'dry_run', 'command_topic', 'execution', 'artifact_id')


def values_of(status) -> dict:
    """A DiagnosticStatus's KeyValues as a dict."""
    return {kv.key: kv.value for kv in status.values} if status is not None else {}


def level_of(status) -> str:
    return LEVEL_NAMES.get(bytes(status.level), '?') if status is not None else 'NONE'


def summary_line(client) -> str:
    """One line: state, level, rate, inference p50, commands, faults (a log's view)."""
    status = client.status
    head = f'{client.node_name} {client.lifecycle_state or "?"}'
    age = _age(client.status_at)
    if status is None or age > STATUS_STALE_S:
        return f'{head}: no /diagnostics ' + (
            'yet (the node reports while active)' if status is None else f'for {age:.0f} s')
    v = values_of(status)
    return (f'{head} {level_of(status)}: {v.get("achieved_rate_hz", "?")}/'
            f'{v.get("target_rate_hz", "?")} Hz, inference p50 '
            f'{v.get("inference_p50_ms", "-")} ms, commands {v.get("commands_published", "?")}'
            f', stale ticks {v.get("stale_ticks", "?")}, rejected '
            f'{v.get("rejected_messages", "?")}, errors {v.get("inference_errors", "?")}: '
            f'{status.message}')


def render(client, note: str = '', keys: bool = False):
    """The whole view as one rich renderable."""
    status = client.status
    age = _age(client.status_at)
    level = level_of(status)
    header = Text()
    header.append(f'{client.node_name}', style='bold')
    header.append(f'  lifecycle: {client.lifecycle_state or "?"}  ')
    if status is None:
        header.append('no /diagnostics yet: the node reports while active', style='dim')
    else:
        header.append(level, style=f'bold {STYLES.get(level, "")}')
        header.append(f'  {status.message}')
        if age > STATUS_STALE_S:
            header.append(f'  (last status {age:.0f} s ago)', style='red')
    parts = [header]
    v = values_of(status)
    if v:
        parts.append(_columns(_table('rate and latency', v, RATE_KEYS),
                              _table('commands and faults', v, COUNT_KEYS)))
        inputs = {k: val for k, val in v.items()
                  if k.startswith(('age_ms.', 'publishers.', 'image_size.'))}
        groups = {k[len('group.'):]: val for k, val in v.items() if k.startswith('group.')}
        parts.append(_columns(_table('inputs', inputs, sorted(inputs)),
                              _table('groups', groups, sorted(groups))))
    if client.profile is not None:
        parts.append(_profile_table(client.profile, f'{client.node_name}/profile',
                                    _age(client.profile_at)))
    lines = list(client.log)[-6:]
    if lines:
        log = Text('node log\n', style='bold')
        for _, lvl, text in lines:
            log.append(f'{lvl:5s} {text}\n', style=STYLES.get(lvl, 'dim'))
        parts.append(log)
    if note:
        parts.append(Text(note, style='cyan'))
    if keys:
        parts.append(Text('keys: c configure  a activate  d deactivate  u cleanup  h hold  '
                          'r resume  q quit', style='dim'))
    return Group(*parts)


def _age(at) -> float:
    return math.inf if at is None else time.monotonic() - at


def _table(title: str, values: dict, keys) -> Table:
    table = Table(title=title, title_justify='left', show_header=False, box=None)
    table.add_column(style='dim')
    table.add_column()
    for key in keys:
        if key in values:
            table.add_row(key, values[key])
    return table


def _columns(*tables) -> Table:
    grid = Table.grid(padding=(0, 4))
    for table in tables:
        grid.add_column()
    grid.add_row(*tables)
    return grid


def _profile_table(msg, topic: str, age: float) -> Table:
    """The profile array, named by its layout label (PROFILE_LAYOUT when it has none), three
    figures a row."""
    label = msg.layout.dim[0].label.split(',') if msg.layout.dim else list(PROFILE_LAYOUT)
    shown = [(name, _number(name, value)) for name, value in zip(label, msg.data)]
    table = Table(title=f'{topic} ({age:.0f} s ago)', title_justify='left', show_header=False,
                  box=None)
    for _ in range(3):
        table.add_column(style='dim')
        table.add_column(justify='right')
    for row in range(0, len(shown), 3):
        cells = [cell for pair in shown[row:row + 3] for cell in pair]
        table.add_row(*cells, *[''] * (6 - len(cells)))
    return table


def _number(name: str, value: float) -> str:
    if math.isnan(value):
        return '-'
    if name == 'level':
        return list(LEVELS)[int(value)] if 0 <= value < len(LEVELS) else f'{value:g}'
    return f'{value:.1f}' if name.endswith(('_ms', '_hz')) else f'{value:g}'
