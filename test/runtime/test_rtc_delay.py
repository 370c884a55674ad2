"""Real-time chunking's delay from measured latency (runtime/rtc_delay.py): cold calls left out,
a high percentile of the rest, and the tick a chunk is expected to be merged at."""

import pytest

from lamp_ros.runtime.rtc_delay import arrival_time, LatencyWindow


def test_the_first_calls_do_not_count_and_the_estimate_leans_high():
    window = LatencyWindow(size=10, cold_calls=2, percentile=90.0)
    assert window.expected() == 0.0
    for seconds in (3.0, 1.5):          # cold: lazy initialisation, graph capture
        window.record(seconds)
    assert window.expected() == 0.0
    for seconds in (0.10, 0.11, 0.12, 0.10, 0.30):
        window.record(seconds)
    assert 0.12 < window.expected() < 0.30   # above the median, below the one slow call
    for _ in range(10):                      # the window slides: the slow call is forgotten
        window.record(0.1)
    assert window.expected() == pytest.approx(0.1)


def test_the_arrival_is_the_first_tick_after_the_inference_ends():
    period = 0.05
    assert arrival_time(1.0, 1.0, 0.0, period) == pytest.approx(1.0)        # sync, fresh
    assert arrival_time(1.0, 1.0, 0.12, period) == pytest.approx(1.15)      # 3 ticks
    assert arrival_time(1.0, 0.9, 0.12, period) == pytest.approx(0.9 + 0.25)  # + its age
    assert arrival_time(1.0, 1.0, 0.10, period) == pytest.approx(1.10)      # exactly 2
