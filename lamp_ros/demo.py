"""The README's main job: the trained demo policy driving the MuJoCo arm through the ROS node.

Builds artifacts/viperx_pick_place_demo (config/specs/viperx_pick_place_demo.yaml: a tiny
pi0.5 trained on the world's expert demonstrations) when missing, not loading, or built from
another version of the spec; starts vla_node (autostart) in its own process as on a robot, and
the world viperx_pick_place in real time here (sim/world/live.py), over DDS on localhost. One
episode of the pick-and-place task runs once the node listens; then it prints the outcome
(from the physics), the rate, latency percentiles, the node's diagnostics and a few commands,
and saves the overhead camera's frames.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORLD = 'viperx_pick_place'
SPEC = os.path.join(ROOT, 'config', 'specs', f'{WORLD}_demo.yaml')
ARTIFACT = os.path.join(ROOT, 'artifacts', f'{WORLD}_demo')
FIRST_COMMAND_TIMEOUT_S = 60
EPISODE_MARGIN_S = 30   # beyond the episode's length: a loaded machine's slow start


def spec_changes(artifact: str, spec: str) -> list:
    """The top-level spec keys whose values differ between the spec file and the copy the
    artifact was built from (its spec.json): [] when the artifact is the spec's."""
    import json

    from lamp_ros.spec import load_spec
    with open(os.path.join(artifact, 'spec.json'), encoding='utf-8') as f:
        built = json.load(f)
    wanted = json.loads(json.dumps(load_spec(spec).to_dict()))
    return sorted(k for k in set(built) | set(wanted) if built.get(k) != wanted.get(k))


def ensure_artifact(console: Console, spec: str = SPEC, out: str = ARTIFACT) -> str:
    """Compile the tiny artifact if it is missing, does not load (corrupt, or built by an
    older lamp_ros whose graph this runtime refuses: the same Runtime.load the node runs) or
    was built from another version of the spec (a spec edit shows in the demo at once)."""
    from lamp_ros.runtime import Runtime
    try:
        Runtime.load(out)
        changed = spec_changes(out, spec)
        if not changed:
            console.print(f'artifact: {os.path.relpath(out)} (present, verified, loads)')
            return out
        console.print(f'artifact: rebuilding {os.path.relpath(out)} (built from another '
                      f'{os.path.basename(spec)}: {", ".join(changed)} changed)')
    except ValueError as exc:
        console.print(f'artifact: building {os.path.relpath(out)} ({exc})')
    from lamp_ros.compiler.build import compile_spec
    start = time.perf_counter()
    from lamp_ros.progress import progress_lines
    with progress_lines('compiling') as say:  # lines a log keeps too, not a spinner alone
        result = compile_spec(spec, out, progress=say)
    console.print(f'artifact {result.artifact_id[:16]} built in '
                  f'{time.perf_counter() - start:.0f} s, parity '
                  f'{"passed" if result.parity_passed else "FAILED"}')
    return out


def run_demo(seconds: float = 0.0, execution: str = 'async', episode: int = 0) -> int:
    """vla_node in its own process (as on a robot); the world and a probe here. `seconds`: the
    episode's length (0: the world's). Exit status 0 whether or not the task succeeded (the
    demo shows what happened), 1 when the node never commanded the arm."""
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    from lamp_ros.node.dds_profile import use_lamp_profile
    use_lamp_profile()  # for the simulated arm here and the node it starts
    console = Console()
    artifact = ensure_artifact(console)

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from std_msgs.msg import Float64MultiArray
    from trajectory_msgs.msg import JointTrajectory

    from lamp_ros.sim.robot import SimRobot

    node = subprocess.Popen([sys.executable, '-m', 'lamp_ros.node.vla_node', '--ros-args',
                             '-p', f'artifact:={artifact}', '-p', 'autostart:=true',
                             '-p', f'execution:={execution}'])
    commands, latency, diagnostics = [], [], []
    try:
        with rclpy.init():
            from rclpy.parameter import Parameter
            # the world's arm is the robot the artifact was built for (its spec's robot:); the
            # episode starts when the node subscribes to every camera and the joint states
            sim = SimRobot(parameter_overrides=[
                Parameter('world', value=WORLD), Parameter('one_episode', value=True),
                Parameter('task_seed', value=0), Parameter('task_episode', value=episode),
                Parameter('episode_seconds', value=float(seconds))])
            probe = Node('demo_probe')
            probe.create_subscription(JointTrajectory, '/vla_policy/joint_trajectory',
                                      lambda m: commands.append((time.monotonic(), m)), 50)
            probe.create_subscription(Float64MultiArray, '/vla_policy/command_latency',
                                      lambda m: latency.append(list(m.data)), 50)
            probe.create_subscription(DiagnosticArray, '/diagnostics',
                                      lambda m: diagnostics.append(m.status[0]), 10)
            executor = SingleThreadedExecutor()  # short callbacks (see vla_node.executor_for)
            executor.add_node(sim)
            executor.add_node(probe)
            thread = threading.Thread(target=executor.spin, daemon=True)
            thread.start()
            # the node loads and verifies the artifact, then discovery: seconds on a busy machine
            end = time.monotonic() + FIRST_COMMAND_TIMEOUT_S
            while not commands and time.monotonic() < end and node.poll() is None:
                time.sleep(0.1)
            if not commands:
                executor.shutdown()
                thread.join()
                console.print(f'[red]no command from vla_node in {FIRST_COMMAND_TIMEOUT_S} s; '
                              'see its log above[/]')
                return 1
            length = sim.live.seconds
            console.print(f'episode {episode} of world {WORLD}: the arm has {length:g} s to put '
                          f'the cube in the bin ({execution} inference, 22 Hz)...')
            strip, next_frame = [], 0.0
            end = time.monotonic() + length + EPISODE_MARGIN_S
            while not sim.finished.done() and time.monotonic() < end:
                time.sleep(0.05)   # polls the episode's end; frames kept once a simulated second
                started = sim.live.started is not None
                if started and sim.live.physics.time >= next_frame and 'base' in sim.frames:
                    strip.append(sim.frames['base'].copy())
                    next_frame += 1.0
            executor.shutdown()
            thread.join()  # a spin thread alive at exit aborts the process in rclpy's C++
            outcome = sim.live.physics.outcome() if sim.finished.done() else None
            success = sim.finished.result()[0] if sim.finished.done() else None
            followed = sim.commands
            max_step = np.array([j.max_step for j in sim.robot.joints])
    finally:
        node.send_signal(signal.SIGINT)
        try:
            node.wait(timeout=15)
        except subprocess.TimeoutExpired:
            node.kill()
    _print_summary(console, commands, latency, diagnostics, followed)
    _print_steps(console, commands, max_step)
    _print_task(console, success, outcome, strip)
    return 0


def _print_task(console, success, outcome, strip) -> None:
    """How the episode went (the physics' verdict at its end) and a strip of the overhead
    camera, one frame a simulated second, in artifacts/demo/."""
    import cv2

    if success is None:
        console.print('[red]task: the episode did not finish in time[/] (a loaded machine? '
                      'see the node\'s log above)')
    else:
        console.print(f'[bold]task[/] (put the red cube in the bin): '
                      f'{"[green]success[/]" if success else "[red]failure[/]"}, {outcome}; '
                      f'lamp eval --world {WORLD} measures it over episodes')
    if strip:
        folder = os.path.join(ROOT, 'artifacts', 'demo')
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, 'base_camera.png')
        cv2.imwrite(path, cv2.cvtColor(np.hstack(strip), cv2.COLOR_RGB2BGR))
        console.print(f'[bold]base camera[/], one frame a second: {os.path.relpath(path)}')


def _print_steps(console, commands, max_step) -> None:
    """How smooth the commands were: the change between consecutive commands as a share of the
    robot's max step per tick (a chattering policy jumps by the whole max step every tick)."""
    positions = np.array([list(m.points[0].positions) for _, m in commands])
    if len(positions) < 3:
        return
    share = (np.abs(np.diff(positions, axis=0)) / max_step).max(axis=1)
    console.print(f'[bold]command steps[/]: {np.mean(share <= 0.5):.0%} of ticks within half the '
                  f'max step per tick; median {np.median(share):.2f}, largest {share.max():.2f} '
                  'of it')


def _print_summary(console, commands, latency, diagnostics, followed) -> None:
    times = np.array([t for t, _ in commands])
    steady = times[times > times[0] + 2.0] if times.size else times
    rate = (len(steady) - 1) / (steady[-1] - steady[0]) if len(steady) > 2 else 0.0
    fresh = [row for row in latency if row[4] == 1.0]
    e2e = np.array([row[1] for row in fresh]) * 1e3
    compute = np.array([row[2] for row in fresh]) * 1e3
    console.print(f'[bold]commands[/]: {len(commands)} received, {rate:.2f} Hz (target '
                  f'22.00); the arm followed {followed} of them')
    if e2e.size:
        console.print('[bold]latency[/] (camera stamp -> command): p50 '
                      f'{np.percentile(e2e, 50):.1f} ms, p90 {np.percentile(e2e, 90):.1f} ms, '
                      f'p99 {np.percentile(e2e, 99):.1f} ms; tick compute p50 '
                      f'{np.percentile(compute, 50):.2f} ms')
    if diagnostics:
        status = diagnostics[-1]
        v = {kv.key: kv.value for kv in status.values}
        level = {b'\x00': 'OK', b'\x01': 'WARN', b'\x02': 'ERROR', b'\x03': 'STALE'}
        console.print(f'[bold]node[/] (its own clock): {v.get("achieved_rate_hz")} Hz, '
                      f'inference p50 {v.get("inference_p50_ms")} ms / p99 '
                      f'{v.get("inference_p99_ms")} ms, deadline misses '
                      f'{v.get("deadline_misses")}, stale ticks {v.get("stale_ticks")}, '
                      f'rejected inputs {v.get("rejected_messages")}')
        console.print(f'[bold]diagnostics[/]: {level.get(status.level, "?")} - '
                      f'{status.message}')
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
