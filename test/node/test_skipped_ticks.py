"""`skipped_periods`: control periods that passed with no tick (the node's timer does not run
the ticks a starved process missed, so only the gap between ticks shows them)."""

import pytest

from lamp_ros.node.engine import skipped_periods

PERIOD = 1.0 / 22


@pytest.mark.parametrize('gap, skipped', [
    (PERIOD, 0),            # on time
    (1.4 * PERIOD, 0),      # late, within jitter
    (0.3 * PERIOD, 0),      # a catch-up tick right after a late one
    (1.6 * PERIOD, 1),      # one period had no tick
    (2.0 * PERIOD, 1),
    (5.0 * PERIOD, 4),
])
def test_gaps_between_ticks_count_the_periods_without_one(gap, skipped):
    assert skipped_periods(10.0, 10.0 + gap, PERIOD) == skipped


def test_first_tick_and_clock_jumps_back_count_nothing():
    assert skipped_periods(None, 3.0, PERIOD) == 0
    assert skipped_periods(5.0, 4.0, PERIOD) == 0   # sim time reset
