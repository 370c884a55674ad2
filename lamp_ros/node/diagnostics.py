"""What the node reports: a DiagnosticArray for rqt_runtime_monitor and a numeric profile
array for rqt_plot (which plots numbers, not KeyValue strings).

PROFILE_LAYOUT is the documented order of `/vla_policy/profile` (std_msgs/Float64MultiArray);
`layout.dim[0].label` carries it too, comma-separated. Times in milliseconds, NaN when unknown.
"""

from collections import deque
import math
import threading
import time

PROFILE_LAYOUT = (
    'achieved_rate_hz', 'target_rate_hz', 'tick_p50_ms', 'tick_p99_ms', 'inference_p50_ms',
    'inference_p99_ms', 'e2e_latency_p50_ms', 'e2e_latency_p99_ms', 'deadline_misses',
    'stale_ticks', 'rejected_messages', 'inference_errors', 'max_image_age_ms',
    'joint_state_age_ms', 'level',
)
LEVELS = {'OK': b'\x00', 'WARN': b'\x01', 'ERROR': b'\x02', 'STALE': b'\x03'}


class ReceiveRates:
    """Messages received per input topic, as the node's callbacks see them: the total and the
    rate over the last `window_s` seconds (0 once a topic went quiet). What reaches the node
    can differ from what was published: DDS drops what its transport cannot carry."""

    def __init__(self, window_s: float = 2.0):
        self.window_s = window_s
        self._lock = threading.Lock()
        self._counts = {}
        self._times = {}

    def note(self, topic: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._counts[topic] = self._counts.get(topic, 0) + 1
            self._times.setdefault(topic, deque(maxlen=1024)).append(now)

    def report(self) -> dict:
        """topic -> {'received': total, 'rate_hz': over the last window}."""
        since = time.monotonic() - self.window_s
        with self._lock:
            recent = {t: [x for x in times if x >= since] for t, times in self._times.items()}
            counts = dict(self._counts)
        return {t: {'received': counts[t],
                    'rate_hz': (len(r) - 1) / (r[-1] - r[0]) if len(r) > 2 and r[-1] > r[0]
                    else 0.0}
                for t, r in recent.items()}


def _ms(stats, key):
    return stats[key] if stats else math.nan


def profile_values(report: dict) -> list:
    """Numbers in PROFILE_LAYOUT order from the node's report dict."""
    p = report['profile']
    ages = [a for k, a in report['ages'].items() if k.startswith('image.') and a is not None]
    joint_age = report['ages'].get('joint_states')
    e2e = report['e2e']
    return [
        report['achieved_rate_hz'], report['target_rate_hz'],
        _ms(p['tick'], 'p50_ms'), _ms(p['tick'], 'p99_ms'),
        _ms(p['inference'], 'p50_ms'), _ms(p['inference'], 'p99_ms'),
        _ms(e2e, 'p50_ms'), _ms(e2e, 'p99_ms'),
        float(p['deadline_misses']), float(report['stale_ticks']),
        float(report['rejected_total']), float(p['inference_errors']),
        max(ages) * 1e3 if ages else math.nan,
        joint_age * 1e3 if joint_age is not None else math.nan,
        float(list(LEVELS).index(report['level'])),
    ]


def diagnostic_status(node_name: str, hardware_id: str, report: dict):
    """One DiagnosticStatus `<node>: policy` with the values an operator needs."""
    from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
    status = DiagnosticStatus()
    status.name = f'{node_name}: policy'
    status.hardware_id = hardware_id
    status.level = LEVELS[report['level']]
    status.message = report['message']
    p = report['profile']
    values = {
        'artifact_id': report['artifact_id'],
        'execution': p['execution'],
        'target_rate_hz': f'{report["target_rate_hz"]:.2f}',
        'achieved_rate_hz': f'{report["achieved_rate_hz"]:.2f}',
        'deadline_misses': str(p['deadline_misses']),
        'skipped_ticks': str(report['skipped_ticks']),
        'stale_ticks': str(report['stale_ticks']),
        'rejected_messages': str(report['rejected_total']),
        'last_rejection': report['last_rejection'],
        'inference_errors': str(p['inference_errors']),
        'last_fault': report['last_fault'],
        'commands_published': str(report['published']),
        'held': str(report.get('held', False)).lower(),
        'dry_run': str(report.get('dry_run', False)).lower(),
        'command_topic': report.get('command_topic', ''),
    }
    rtc = p.get('rtc')
    if rtc:  # real-time chunking: the delay the last chunk was generated for
        values['rtc_delay_ticks'] = 'none yet' if rtc['delay'] is None else str(rtc['delay'])
        values['rtc_expected_latency_ms'] = f'{rtc["expected_latency_ms"]:.1f}'
    for name, age in report['ages'].items():
        values[f'age_ms.{name}'] = 'never' if age is None else f'{age * 1e3:.1f}'
    for topic, count in sorted(report.get('publishers', {}).items()):
        values[f'publishers.{topic}'] = str(count)  # matched from the node's side
    for topic, seen in sorted(report.get('received', {}).items()):
        values[f'received.{topic}'] = str(seen['received'])  # since configure
        values[f'receive_rate_hz.{topic}'] = f'{seen["rate_hz"]:.2f}'
    for slot, (height, width) in report.get('sizes', {}).items():
        values[f'image_size.{slot}'] = f'{width}x{height}'
    for key in ('tick', 'inference'):
        if p[key]:
            values[f'{key}_p50_ms'] = f'{p[key]["p50_ms"]:.2f}'
            values[f'{key}_p99_ms'] = f'{p[key]["p99_ms"]:.2f}'
    if report['e2e']:
        values['e2e_latency_p50_ms'] = f'{report["e2e"]["p50_ms"]:.2f}'
        values['e2e_latency_p99_ms'] = f'{report["e2e"]["p99_ms"]:.2f}'
    for name, s in sorted(p['groups'].items()):
        values[f'group.{name}.p50_ms'] = f'{s["p50_ms"]:.2f}'
        values[f'group.{name}.p99_ms'] = f'{s["p99_ms"]:.2f}'
        values[f'group.{name}.backend'] = p['backends'].get(name, '')
    for name, length in sorted(p.get('text_lengths', {}).items()):
        values[f'group.{name}.text_length'] = str(length)  # prompt tokens it last ran at
    for name, status_line in sorted(p.get('gemm_algorithms', {}).items()):
        values[f'group.{name}.gemm_algorithms'] = status_line
    status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
    return status
