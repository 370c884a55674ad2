"""The node's status line: every STATUS_PERIOD_S seconds while active, one log line of what its
/diagnostics say (level, achieved rate, inference and end-to-end p50, commands sent, faults),
so a terminal shows that the node works, or why not, without any ROS tool.

It is made from the report the diagnostics timer has just built (VlaNode.report), so it costs
the control tick nothing.
"""

import time

STATUS_PERIOD_S = 5.0


class StatusLine:
    """`due(report)` -> the line when STATUS_PERIOD_S has passed since the last one (the first
    report of the node gives one at once), else None."""

    def __init__(self, period_s: float = STATUS_PERIOD_S):
        self.period_s = period_s
        self._last = None   # (monotonic time, commands published then)

    def due(self, report: dict, now: float | None = None) -> str | None:
        now = time.monotonic() if now is None else now
        if self._last is not None and now - self._last[0] < self.period_s:
            return None
        since, published = self._last or (now, 0)
        if report['published'] < published:   # a new activation counts from 0
            published = 0
        self._last = (now, report['published'])
        return format_status(report, report['published'] - published, now - since)


def format_status(report: dict, sent: int, seconds: float) -> str:
    """One line from a VlaNode report: `sent` commands in the last `seconds`."""
    p = report['profile']
    inference = p['inference']
    e2e = report['e2e']
    figures = [f'{report["achieved_rate_hz"]:.1f}/{report["target_rate_hz"]:.1f} Hz',
               f'inference p50 {inference["p50_ms"]:.1f} ms' if inference else
               'no inference yet']
    if e2e:
        figures.append(f'e2e p50 {e2e["p50_ms"]:.1f} ms')
    window = f' in {seconds:.0f} s' if seconds > 0 else ''
    figures.append(f'{sent} commands sent{window} ({report["published"]} in all)')
    faults = {'stale ticks': report['stale_ticks'], 'rejected inputs': report['rejected_total'],
              'deadline misses': p['deadline_misses'], 'skipped ticks': report['skipped_ticks'],
              'inference errors': p['inference_errors']}
    seen = [f'{n} {name}' for name, n in faults.items() if n]
    figures.append('faults: ' + (', '.join(seen) if seen else 'none'))
    if report['level'] != 'OK' or report.get('held') or report.get('dry_run'):
        figures.append(report['message'])
    return f'{report["level"]}: ' + '; '.join(figures)
