"""The node's status line (node/status_line.py), from a report as VlaNode.report() makes it:
one line at once, then one per period, commands counted since the last line (from 0 again
after a re-activation), faults named only when there are some."""

from lamp_ros.node.status_line import StatusLine


def report(published=0, level='OK', message='publishing at 22.0 Hz', stale=0, inference=True,
           **extra):
    return {'level': level, 'message': message, 'achieved_rate_hz': 21.96,
            'target_rate_hz': 22.0, 'published': published, 'stale_ticks': stale,
            'rejected_total': 0, 'skipped_ticks': 0,
            'e2e': {'p50_ms': 61.04, 'p99_ms': 90.0} if inference else None,
            'profile': {'inference': {'p50_ms': 18.25, 'p99_ms': 30.0} if inference else None,
                        'deadline_misses': 0, 'inference_errors': 0}, **extra}


def test_one_line_at_once_then_one_per_period():
    status = StatusLine(period_s=5.0)
    first = status.due(report(published=20), now=100.0)
    assert first == ('OK: 22.0/22.0 Hz; inference p50 18.2 ms; e2e p50 61.0 ms; 20 commands '
                     'sent (20 in all); faults: none')
    assert status.due(report(published=60), now=104.0) is None
    assert status.due(report(published=130), now=105.0) == (
        'OK: 22.0/22.0 Hz; inference p50 18.2 ms; e2e p50 61.0 ms; 110 commands sent in 5 s '
        '(130 in all); faults: none')
    # re-activated: the node counts from 0 again
    assert '15 commands sent in 5 s (15 in all)' in status.due(report(published=15), now=110.0)


def test_faults_and_a_level_other_than_ok_say_why():
    line = StatusLine().due(report(level='STALE', message="no input yet from ['base']",
                                   stale=12, inference=False), now=0.0)
    assert line == ("STALE: 22.0/22.0 Hz; no inference yet; 0 commands sent (0 in all); "
                    "faults: 12 stale ticks; no input yet from ['base']")
    held = StatusLine().due(report(level='WARN', message='held by ~/hold since 3.0 s',
                                   held=True), now=0.0)
    assert held.startswith('WARN: ') and held.endswith('held by ~/hold since 3.0 s')
