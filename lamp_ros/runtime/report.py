"""Readable tables of a runtime profile (rich), for `lamp run`, `lamp bench` and the demo."""

from rich.console import Console
from rich.table import Table


def _row(name, s):
    return (name, str(s['count']), f'{s["p50_ms"]:.2f}', f'{s["p90_ms"]:.2f}',
            f'{s["p99_ms"]:.2f}', f'{s["max_ms"]:.2f}')


def profile_table(profile: dict, title: str = 'profile') -> Table:
    table = Table(title=title)
    for col in ('what', 'count', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms'):
        table.add_column(col, justify='left' if col == 'what' else 'right')
    for key in ('tick', 'inference'):
        if profile.get(key):
            table.add_row(*_row(f'[bold]{key}[/]', profile[key]))
    for section in ('groups', 'gpu', 'nodes'):
        for name, s in sorted(profile.get(section, {}).items(),
                              key=lambda kv: -kv[1]['p50_ms']):
            label = {'groups': 'group', 'gpu': 'gpu', 'nodes': '  node'}[section]
            backend = profile.get('backends', {}).get(name, '')
            table.add_row(*_row(f'{label} {name}' + (f' ({backend})' if backend else ''), s))
    return table


def print_profile(profile: dict, title: str = 'profile', console: Console | None = None):
    console = console or Console(width=max(110, Console().width))
    console.print(profile_table(profile, title))
    console.print(f'ticks {profile["ticks"]}, deadline misses {profile["deadline_misses"]} '
                  f'(period {1e3 / profile["rate_hz"]:.1f} ms), inference errors '
                  f'{profile["inference_errors"]}, arena {profile["arena_bytes"] / 1e6:.2f} MB, '
                  f'execution {profile["execution"]} on {profile["device"]}')
