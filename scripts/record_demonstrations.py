"""Demonstrations of a world's scripted expert, recorded over ROS 2 as a policy's would be.

    python scripts/record_demonstrations.py --world viperx_pick_place --episodes 20 \
        --out bags/viperx_demos [--seconds 8] [--moving 0.05] [--keep-failures]

For each episode: `lamp record` starts on the robot's topics, then `lamp sim --world W
--expert --episode I --one-episode` runs the episode once the recorder listens (the expert
drives the arm through the command topic a policy uses) and exits with the task's outcome, and
the recorder is stopped (its bag closed). Bags of failed episodes are removed unless
`--keep-failures`. `lamp dataset <out>/episode_* --out DIR` then writes a LeRobot dataset
(docs/dataset.md). Every command runs in this process's ROS domain (ROS_DOMAIN_ID).
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

from lamp_ros.sim.world.world import load_world


def lamp(*args) -> list:
    return [os.path.join(os.path.dirname(sys.executable), 'lamp'), *args]


def record_episode(world: str, index: int, bag: str, seconds: float | None,
                   moving: float | None = None) -> bool:
    """One episode recorded into `bag`; whether the expert succeeded."""
    cameras = list(load_world(world).robot.cameras)
    recorder = subprocess.Popen(lamp('record', '--out', bag, '--duration', '3600',
                                     '--cameras', *cameras))
    try:
        sim = [*lamp('sim', '--world', world, '--expert', '--episode', str(index),
                     '--one-episode')] + (['--seconds', str(seconds)] if seconds else []) + \
            (['--moving', str(moving)] if moving is not None else [])
        outcome = subprocess.run(sim).returncode
        if outcome not in (0, 1):
            raise SystemExit(f'lamp sim failed (exit status {outcome})')
        return outcome == 0
    finally:
        time.sleep(0.5)   # the last messages in flight reach the recorder
        recorder.send_signal(signal.SIGINT)
        if recorder.wait(timeout=60) != 0:
            raise SystemExit(f'lamp record failed (exit status {recorder.returncode})')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--world', default='viperx_pick_place')
    parser.add_argument('--episodes', type=int, default=10)
    parser.add_argument('--first', type=int, default=0, help='index of the first episode')
    parser.add_argument('--seconds', type=float, help='episode length (default: the world\'s)')
    parser.add_argument('--moving', type=float, help='the bin slides at this speed (m/s)')
    parser.add_argument('--out', required=True, help='folder of bags to create')
    parser.add_argument('--keep-failures', action='store_true')
    args = parser.parse_args()
    if os.path.exists(args.out):
        raise SystemExit(f'{args.out}: exists; give a new folder')
    os.makedirs(args.out)
    kept = 0
    for index in range(args.first, args.first + args.episodes):
        bag = os.path.join(args.out, f'episode_{index:04d}')
        success = record_episode(args.world, index, bag, args.seconds, args.moving)
        if not success and not args.keep_failures:
            shutil.rmtree(bag)
        kept += success or args.keep_failures
        print(f'[demos] episode {index}: {"success" if success else "failure"}'
              f'{"" if success or args.keep_failures else " (bag removed)"}', flush=True)
    print(f'[demos] {kept} bags in {args.out}')


if __name__ == '__main__':
    main()
