"""ReceiveRates (lamp_ros/node/diagnostics.py): what the node's `received.<topic>` and
`receive_rate_hz.<topic>` diagnostics report, on a clock the test sets."""

from lamp_ros.node import diagnostics


def test_totals_and_the_rate_of_the_last_window_falling_to_zero_when_quiet(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(diagnostics.time, 'monotonic', lambda: now[0])
    rates = diagnostics.ReceiveRates(window_s=2.0)
    assert rates.report() == {}
    for i in range(90):  # 30 Hz for 3 s on one topic, 10 Hz on another
        now[0] = 100.0 + i / 30
        rates.note('/camera/base/image_raw')
        if i % 3 == 0:
            rates.note('/joint_states')
    seen = rates.report()
    assert seen['/camera/base/image_raw']['received'] == 90
    assert abs(seen['/camera/base/image_raw']['rate_hz'] - 30.0) < 1e-6
    assert seen['/joint_states']['received'] == 30
    assert abs(seen['/joint_states']['rate_hz'] - 10.0) < 1e-6
    now[0] += 2.5  # quiet for longer than the window: no rate, the totals stay
    assert rates.report() == {'/camera/base/image_raw': {'received': 90, 'rate_hz': 0.0},
                              '/joint_states': {'received': 30, 'rate_hz': 0.0}}
