"""The recording and regression subcommands of `lamp`: record, calibration-set, replay.

`register(subparsers)` adds them to the `lamp` parser; each handler calls one public function of
lamp_ros/regress and imports it lazily, so `lamp --help` stays fast.
"""

import json
import sys

from lamp_ros.outputs import output_path


def _record(args) -> int:
    from lamp_ros.regress.record import record
    from lamp_ros.regress.topics import recorded

    def said(session):
        cameras = ', '.join(f'{slot} {c["topic"]}' for slot, c in session['cameras'].items())
        print(f'session of {session.get("node")}: artifact {session.get("artifact_id", "")[:16]}'
              f' ({session.get("execution")}), cameras {cameras}', flush=True)
    result = record(args.out, args.duration, storage=args.storage,
                    topic_types=recorded(args.cameras),
                    on_match=lambda topic: print(f'matched {topic}', flush=True),
                    on_session=said)
    stopped = ', stopped by a signal' if result['stopped'] == 'signal' else ''
    print(f'recorded {result["messages"]} messages -> {result["bag"]} ({result["storage"]})'
          f'{stopped}')
    for topic, count in sorted(result['topics'].items()):
        print(f'  {topic:40s} {count}')
    return 0


def _calibration_set(args) -> int:
    from lamp_ros.artifact.load import open_artifact
    from lamp_ros.regress.calibration_set import bag_observations, write_npz
    abi = open_artifact(args.artifact).manifest['abi']
    observations = bag_observations(args.bag, abi['camera_slots'], abi['joint_names'],
                                    args.prompt if abi.get('prompt', True) else None,
                                    args.samples)
    paths = write_npz(observations, args.out)
    print(f'wrote {len(paths)} observations -> {args.out} (precision.calibration: '
          f'{{source: npz, path: {args.out}}})')
    return 0


def _replay(args) -> int:
    from lamp_ros.regress import replay as rp
    if not args.artifact:
        raise ValueError('--artifact is needed: the artifact to replay through (with --live: '
                         'the one the running node runs, to check its commands against)')
    common = {'atol': args.atol, 'rtol': args.rtol}
    if args.save_golden:
        output_path(args.save_golden, '--save-golden')
    if args.against:
        report = rp.localize(args.bag, args.artifact, args.against, prompt=args.prompt,
                             **common)
        ok = not report['diverged']
    elif args.live:
        from lamp_ros.regress.live import live_replay, LiveReplayError
        try:
            report = live_replay(args.bag, args.artifact, rate=args.rate,
                                 discovery_timeout=args.discovery_timeout,
                                 session_out=args.session_out, **common)
        except LiveReplayError as exc:
            print(f'FAILED: {exc}', file=sys.stderr)
            return 1
        ok = report['passed']
    else:
        report = rp.replay(args.bag, args.artifact, prompt=args.prompt, golden=args.golden,
                           **common)
        ok = report['passed']
        if args.save_golden:
            with open(args.save_golden, 'w', encoding='utf-8') as f:
                json.dump({'commands': report['produced'], 'artifact_id': report[
                    'artifact_id']}, f)
    report.pop('produced', None)
    if args.json:
        print(json.dumps(report, indent=1))
    elif args.against:
        print(f'first divergence: node {report["node"]} ({report.get("value")}) at tick '
              f'{report.get("tick")}, max abs {report.get("max_abs", 0):.3g}'
              if report['diverged'] else
              f'no divergence over {report["ticks"]} ticks ({report["values_compared"]} '
              'values compared)')
    else:
        from lamp_ros.regress.report import replay_lines
        for line in replay_lines(report, args.atol, args.rtol):
            print(line)
    return 0 if ok else 1


def register(sub) -> None:
    p = sub.add_parser('record', help='record the node\'s inputs and outputs into a rosbag2')
    p.add_argument('--out', required=True, help='bag directory to create')
    p.add_argument('--duration', type=float, default=10.0,
                   help='seconds (Ctrl-C or SIGTERM stops it sooner, the bag closed)')
    p.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap')
    p.add_argument('--cameras', nargs='+', default=['base', 'left_wrist', 'right_wrist'],
                   help='camera slots to record (/camera/<slot>/image_raw, raw and compressed); '
                   'default: the simulated arm\'s')
    p.set_defaults(func=_record)

    p = sub.add_parser('calibration-set', help='observations from a bag as .npz files, for a '
                       'precision plan\'s calibration (precision.calibration source npz)')
    p.add_argument('bag')
    p.add_argument('--artifact', required=True,
                   help='an artifact of the policy: its cameras, joint order and prompt use')
    p.add_argument('--out', required=True, help='folder for the .npz files')
    p.add_argument('--samples', type=int, default=32,
                   help='observations, evenly spaced over the bag')
    p.add_argument('--prompt', default='pick up the red cube and place it in the bowl')
    p.set_defaults(func=_calibration_set)

    p = sub.add_parser('replay', help='replay a bag through an artifact and compare commands')
    p.add_argument('bag')
    p.add_argument('--artifact', help='artifact to replay through (with --live: the one the '
                   'running node runs)')
    p.add_argument('--against', help='second artifact: name the first diverging node')
    p.add_argument('--live', action='store_true', help='publish to a running node instead')
    p.add_argument('--rate', type=float, default=1.0, help='live mode: playback speed')
    p.add_argument('--discovery-timeout', type=float, default=20.0,
                   help='live mode: seconds to wait for the node\'s subscriptions and '
                   'publisher before failing')
    p.add_argument('--golden', help='compare with this golden JSON instead of the bag')
    p.add_argument('--save-golden', help='write the produced commands as a golden JSON')
    p.add_argument('--session-out', help='live mode: keep the session (inputs as published, '
                   'the node\'s records) as a bag here')
    p.add_argument('--prompt', help='the task prompt (default: the recorded node\'s, else the '
                   'default prompt)')
    p.add_argument('--atol', type=float, default=1e-5)
    p.add_argument('--rtol', type=float, default=1e-4)
    p.add_argument('--json', action='store_true')
    p.set_defaults(func=_replay)
