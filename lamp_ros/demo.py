"""The README's main job: the tiny artifact driving the simulated robot through the ROS node.

Builds artifacts/pi05_tiny when missing (or stale against the spec), starts the simulated arm
and vla_node (autostart) in one process over DDS on localhost, runs for `seconds`, and prints
the achieved rate, latency percentiles, the node's diagnostics and a few commands.
"""

import os
import threading
import time

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, 'config', 'specs', 'pi05_tiny.yaml')
ARTIFACT = os.path.join(ROOT, 'artifacts', 'pi05_tiny')


def ensure_artifact(console: Console, spec: str = SPEC, out: str = ARTIFACT) -> str:
    """Compile the tiny artifact if it is missing or does not load."""
    from lamp_ros.artifact.load import open_artifact
    try:
        open_artifact(out)
        console.print(f'artifact: {os.path.relpath(out)} (present, verified)')
        return out
    except ValueError as exc:
        console.print(f'artifact: building {os.path.relpath(out)} ({exc})')
    from lamp_ros.compiler.build import compile_spec
    start = time.perf_counter()
    with console.status('compiling') as status:
        result = compile_spec(spec, out, progress=status.update)
    console.print(f'artifact {result.artifact_id[:16]} built in '
                  f'{time.perf_counter() - start:.0f} s, parity '
                  f'{"passed" if result.parity_passed else "FAILED"}')
    return out


def run_demo(seconds: float = 10.0, execution: str = 'async') -> int:
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    console = Console()
    artifact = ensure_artifact(console)

    import rclpy
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from std_msgs.msg import Float64MultiArray
    from trajectory_msgs.msg import JointTrajectory

    from lamp_ros.node.vla_node import autostart, VlaNode
    from lamp_ros.sim.robot import SimRobot

    commands, latency = [], []
    with rclpy.init():
        sim = SimRobot()
        node = VlaNode(parameter_overrides=[
            Parameter('artifact', value=artifact), Parameter('autostart', value=True),
            Parameter('execution', value=execution)])
        probe = Node('demo_probe')
        probe.create_subscription(JointTrajectory, '/vla_policy/joint_trajectory',
                                  lambda m: commands.append((time.monotonic(), m)), 50)
        probe.create_subscription(Float64MultiArray, '/vla_policy/command_latency',
                                  lambda m: latency.append(list(m.data)), 50)
        executor = MultiThreadedExecutor(num_threads=4)
        for n in (sim, node, probe):
            executor.add_node(n)
        thread = threading.Thread(target=executor.spin, daemon=True)
        thread.start()
        if not autostart(node):
            console.print('[red]the node did not start; see the log above[/]')
            return 1
        console.print(f'running the simulated arm for {seconds:.0f} s '
                      f'({execution} inference, 22 Hz)...')
        time.sleep(seconds)
        report = node.report()
        node.trigger_deactivate()
        executor.shutdown()
    _print_summary(console, commands, latency, report, sim)
    return 0


def _print_summary(console, commands, latency, report, sim) -> None:
    times = np.array([t for t, _ in commands])
    steady = times[times > times[0] + 2.0] if times.size else times
    rate = (len(steady) - 1) / (steady[-1] - steady[0]) if len(steady) > 2 else 0.0
    fresh = [row for row in latency if row[4] == 1.0]
    e2e = np.array([row[1] for row in fresh]) * 1e3
    compute = np.array([row[2] for row in fresh]) * 1e3
    console.print(f'[bold]commands[/]: {len(commands)} published, achieved '
                  f'{rate:.2f} Hz (target 22.00); the arm followed {sim.commands} of them')
    if e2e.size:
        console.print('[bold]latency[/] (camera stamp -> command): p50 '
                      f'{np.percentile(e2e, 50):.1f} ms, p90 {np.percentile(e2e, 90):.1f} ms, '
                      f'p99 {np.percentile(e2e, 99):.1f} ms; tick compute p50 '
                      f'{np.percentile(compute, 50):.2f} ms')
    p = report['profile']
    if p['inference']:
        console.print(f'[bold]inference[/] (worker): p50 {p["inference"]["p50_ms"]:.1f} ms, '
                      f'p99 {p["inference"]["p99_ms"]:.1f} ms over {p["inference"]["count"]}'
                      f' chunks; deadline misses {p["deadline_misses"]}, stale ticks '
                      f'{report["stale_ticks"]}, rejected inputs {report["rejected_total"]}')
    console.print(f'[bold]diagnostics[/]: {report["level"]} - {report["message"]}')
    if commands:
        msg = commands[-1][1]
        table = Table(title='last commands (JointTrajectory, rad / m)')
        table.add_column('t (s)', justify='right')
        for name in msg.joint_names:
            table.add_column(name, justify='right')
        for t, m in commands[-5:]:
            table.add_row(f'{t - commands[0][0]:.2f}',
                          *(f'{v:+.3f}' for v in m.points[0].positions))
        console.print(table)
