"""Raw camera frames reach vla_node at camera rate.

A camera driver in another process with default settings (test/raw_camera_driver.py: plain
rclpy, no Fast DDS profile, a capture thread publishing back to back) sends the artifact's three
cameras as rgb8 at 30 Hz: 640x480 and 1280x720 best effort (sensor-data QoS, what most drivers
use), 1280x720 reliable (image_transport's default), while the node runs the artifact at 22 Hz
with the profile it starts with (config/fastdds.xml). What
counts is what the node receives: its own diagnostics (`received.<topic>`) over its own clock
(the reports' stamps). Without the profile most of these frames never arrive (docs/node.md:
Raw images)."""

import os
import subprocess
import sys

import pytest

from lamp_ros.node.dds_profile import receive_buffer_warning
from lamp_ros.node.vla_node import LATENCY_LAYOUT

pytestmark = pytest.mark.ros

CONFIGURE, ACTIVATE = 1, 3
SLOTS = ('base', 'left_wrist', 'right_wrist')
TOPICS = [f'/camera/{slot}/image_raw' for slot in SLOTS]
DRIVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      'raw_camera_driver.py')
RATE_HZ = 30.0
WINDOW_S = 5.0


def _values(msg) -> dict:
    return {kv.key: kv.value for kv in msg.status[0].values}


def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _report_after(h, index: int, predicate, timeout: float):
    """The first diagnostics report after h.diagnostics[index] whose values satisfy
    `predicate`, as (its index, the message)."""
    seen = [index]  # reports looked at so far

    def look():
        while seen[-1] + 1 < len(h.diagnostics):
            seen.append(seen[-1] + 1)
            msg = h.diagnostics[seen[-1]][1]
            if predicate(_values(msg), msg):
                return True
        return False
    if not h.wait_for(look, timeout):
        last = _values(h.diagnostics[-1][1]) if h.diagnostics else None
        raise AssertionError(f'no such diagnostics report in {timeout} s; the last: {last}'
                             f'\n--- node log ---\n{h.log()}')
    return seen[-1], h.diagnostics[seen[-1]][1]


def _received_while(h, size: str, qos: str, folder) -> tuple:
    """Run the driver at `size` with `qos`; -> ({topic: Hz received by the node}, fresh
    commands per second) over WINDOW_S seconds of the node's clock, counted from the first
    report that shows the driver matched and its frames arriving."""
    width, height = size.split('x')

    def publishers(values, count):  # as the node sees them: the harness's sim has one
        return all(values.get(f'publishers.{t}') == str(count) for t in TOPICS)
    # the previous driver is gone (the node's view), so what is counted next is this one's
    index, _ = _report_after(h, len(h.diagnostics) - 1, lambda v, _: publishers(v, 1), 30)
    env = {k: v for k, v in os.environ.items() if k != 'FASTDDS_DEFAULT_PROFILES_FILE'}
    with open(folder / f'driver_{size}_{qos}.log', 'w+') as log:
        # its own folder: no DEFAULT_FASTDDS_PROFILES.xml there for Fast DDS to find either
        driver = subprocess.Popen([sys.executable, DRIVER, size, str(RATE_HZ), qos, *TOPICS],
                                  env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
        try:
            index, first = _report_after(h, index, lambda v, _: publishers(v, 2) and all(
                v.get(f'image_size.{s}') == f'{width}x{height}' for s in SLOTS), 60)
            t0 = _stamp(first)
            _, last = _report_after(h, index, lambda _, m: _stamp(m) >= t0 + WINDOW_S, 30)
        finally:
            driver.terminate()
            driver.wait(timeout=30)
    a, b, span = _values(first), _values(last), _stamp(last) - t0
    rates = {t: (int(b[f'received.{t}']) - int(a[f'received.{t}'])) / span for t in TOPICS}
    tick, fresh = LATENCY_LAYOUT.index('tick_s'), LATENCY_LAYOUT.index('fresh')
    ticks = [m for m in list(h.latency) if t0 <= m.data[tick] < t0 + span and m.data[fresh]]
    return rates, len(ticks) / span


def test_raw_frames_from_a_default_publisher_arrive_at_camera_rate(
        tiny_artifact, make_harness, monkeypatch, tmp_path):
    # a host setting only root can change: below it no node-side profile keeps up (node.md)
    host = receive_buffer_warning()
    if host:
        pytest.skip(f'this host cannot buffer raw frames at camera rate: {host}')
    # the node chooses its profile itself, as on a robot (no profile inherited from the tests)
    monkeypatch.delenv('FASTDDS_DEFAULT_PROFILES_FILE', raising=False)
    # the simulated arm gives joint states and follows commands; the driver gives the frames
    h = make_harness(tiny_artifact, sim_params={'cameras_enabled': False})
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE)
    assert os.path.join('config', 'fastdds.xml') in h.log()
    # best effort (most camera drivers) at both sizes, and reliable (image_transport's default)
    runs = [('640x480', 'sensor_data'), ('1280x720', 'sensor_data'), ('1280x720', 'default')]
    results = {run: _received_while(h, *run, tmp_path) for run in runs}
    report = '; '.join(f'{size} {qos}: ' + ', '.join(f'{t.split("/")[2]} {r:.2f} Hz'
                                                     for t, r in rates.items())
                       + f', fresh commands {fresh:.1f} Hz'
                       for (size, qos), (rates, fresh) in results.items())
    print(report)
    for rates, fresh in results.values():
        # 30 Hz sent: at most one frame in 30 lost (the count's phase adds +-1 frame)
        assert min(rates.values()) >= 29.0, report
        # ...while the node computed its 22 Hz from them (at most 10% short: its timer drops
        # the ticks of a process kept off the CPU on a loaded two-core machine)
        assert fresh >= 0.9 * 22.0, report
    assert 'Traceback' not in h.stop()
