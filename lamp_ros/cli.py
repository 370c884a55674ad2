"""`lamp`: the command line. Thin: each subcommand calls one public function."""

import argparse
import json
import os
import sys

from lamp_ros.outputs import output_path
from lamp_ros.progress import progress_lines


def _demo(args) -> int:
    from lamp_ros.demo import run_demo
    return run_demo(seconds=args.seconds, execution=args.execution, episode=args.episode)


def _sim(args) -> int:
    from lamp_ros.sim.robot import main as sim_main
    params = []
    if args.world:
        params += ['-p', f'world:={args.world}']
    world_only = {'--moving': args.moving is not None, '--expert': args.expert,
                  '--episode': args.episode is not None, '--one-episode': args.one_episode,
                  '--seconds': args.seconds is not None}
    given = [flag for flag, on in world_only.items() if on]
    if given and not args.world:
        raise SystemExit(f'lamp sim: {", ".join(given)}: options of a world: give --world NAME')
    for flag, param, value in (('--moving', 'moving_speed', args.moving),
                               ('--episode', 'task_episode', args.episode),
                               ('--seconds', 'episode_seconds', args.seconds)):
        if value is not None:
            params += ['-p', f'{param}:={value}']
    if args.expert:
        params += ['-p', 'expert:=true']
    if args.one_episode:
        params += ['-p', 'one_episode:=true']
    ros_args = args.ros_args or (['--ros-args'] if params else [])
    outcome = sim_main(args=['lamp_sim', *ros_args, *params])
    return 1 if outcome is not None and not outcome[0] else 0
    return 0


def _trace(args) -> int:
    from rich.console import Console

    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import trace_spec
    out = output_path(args.out, '--out')
    console = Console(stderr=True)
    with progress_lines('tracing') as say:
        graph = trace_spec(load_spec(args.spec), export=not args.no_export, progress=say)
    _write(out, graph.to_json())
    console.print(f'{len(graph.nodes)} stages, {len(graph.edges)} edges -> {args.out}')
    return 0


def _compile(args) -> int:
    import time

    from rich.console import Console

    from lamp_ros.compiler.build import compile_spec
    console = Console(stderr=True)
    start = time.perf_counter()
    with progress_lines('compiling') as say:
        result = compile_spec(args.spec, args.out, progress=say,
                              measure_tiles=args.measure_tiles)
    worst = result.parity['worst']
    for name, w in worst.items():
        mark = '[green]ok[/]' if w['passed'] else '[red]FAIL[/]'
        console.print(f'  parity {name:32s} max abs {w["max_abs"]:.3g}  max rel '
                      f'{w["max_rel"]:.3g}  {mark}')
    console.print(f'artifact {result.artifact_id[:16]} -> {result.root} '
                  f'({time.perf_counter() - start:.1f} s)')
    if not result.parity_passed:
        failed = [n for n, w in worst.items() if not w['passed']]
        console.print(f'[red]parity failed[/] against the eager reference at {failed} '
                      f'(tolerance {result.parity["tolerance"]}); see '
                      f'{args.out}/evidence/parity.json')
        return 3
    return 0


def _run(args) -> int:
    from lamp_ros.runtime import Runtime
    from lamp_ros.runtime.loop import run_ticks
    from lamp_ros.runtime.report import print_profile
    if args.trace:
        output_path(args.trace, '--trace')
    runtime = Runtime.load(args.artifact, execution=args.execution)
    try:
        commands = run_ticks(runtime, args.ticks, realtime=not args.fast)
    finally:
        runtime.close()
    served = [c for _, c in commands if c is not None]
    print_profile(runtime.profile(), title=f'lamp run {args.artifact} ({args.ticks} ticks)')
    if served:
        print('last command:', ' '.join(f'{v:+.4f}' for v in served[-1]))
    if args.trace:
        runtime.write_trace(args.trace)
        print(f'trace: {args.trace}')
    return 0


def _bench(args) -> int:
    from lamp_ros.artifact_bench import bench_artifact
    with progress_lines('bench') as say:  # stderr; stdout: the result (JSON with --json)
        result = bench_artifact(args.artifact, runs=args.runs, progress=say)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f'eager reference {result["reference_ms"]:.2f} ms, runtime '
              f'{result["runtime_ms"]:.2f} ms, speedup {result["speedup"]:.2f}x')
        for name, ms in sorted(result['groups_ms'].items()):
            print(f'  {name:24s} {ms:8.3f} ms')
    return 0


def checkpoint_formats() -> dict:
    """format name -> importer, from the installed packages' `lamp_ros.checkpoint_formats`
    entry points (the core knows no model: a policy package brings its formats)."""
    from importlib.metadata import entry_points
    return {ep.name: ep for ep in entry_points(group='lamp_ros.checkpoint_formats')}


def _import(args) -> int:
    formats = checkpoint_formats()
    if args.format:
        if args.format not in formats:
            raise ValueError(f'--format {args.format!r}; known: {", ".join(sorted(formats))}')
        importer = formats[args.format].load()
    else:
        found = [ep.load() for ep in formats.values()]
        found = [imp for imp in found if imp.detect(args.checkpoint)]
        if len(found) != 1:
            raise ValueError(f'{args.checkpoint}: {"no" if not found else "more than one"} '
                             f'checkpoint format matches (known: {", ".join(sorted(formats))}); '
                             'give --format')
        importer = found[0]
    names = [n.strip() for n in args.joint_names.split(',')] if args.joint_names else None
    importer.run(args.checkpoint, args.tokenizer, joint_names=names, out=args.out,
                 asset_id=args.asset_id, target=args.target, robot=args.robot)
    return 0


def _evaluate_one(path: str | None, args, expert: bool = False) -> tuple:
    from lamp_ros.sim.parallel import EvalSetup, run_episodes
    setup = EvalSetup(path, args.world, args.moving, args.merge_mode, expert, args.seed,
                      args.seconds, args.latency_ticks, strip=bool(args.out))
    report, runs, name = run_episodes(setup, args.episodes, args.workers, args.ray,
                                      progress=print)
    low, high = report['success_ci']
    print(f'{name}: success {report["success_rate"]:.0%} over {args.episodes} episodes (95% CI '
          f'{low:.0%}-{high:.0%}) on {report["world"]}, mean error {report["mean_error"]:.3g} '
          f'{report["error_unit"]}, RMS jerk {report["rms_jerk"]:.3g}, max jump at a chunk '
          f'boundary {report["max_boundary_jump"]:.3g} (kink {report["max_boundary_kink"]:.3g})')
    return report, runs, name


def _eval(args) -> int:
    from lamp_ros.sim.eval_report import write_report
    from lamp_ros.sim.evaluate import compare
    if args.compare is not None and (args.artifact is not None or args.expert):
        raise SystemExit('lamp eval: give one ARTIFACT (or --expert), or --compare A B')
    if args.compare is None and args.artifact is None and not (args.expert and args.world):
        raise SystemExit('lamp eval: give one ARTIFACT, --compare A B, or --expert --world NAME')
    if args.moving is not None and not args.world:
        raise SystemExit('lamp eval: --moving is a world\'s task option: give --world NAME')
    if args.workers < 1:
        raise SystemExit(f'lamp eval: --workers: at least 1, got {args.workers}')
    if args.out:  # before the episodes: their results are not lost to a missing folder
        output_path(args.out, '--out')
    if args.compare is None:
        report, runs, name = _evaluate_one(args.artifact, args, args.expert)
        if args.out:
            pictures = write_report(report, args.out, name, runs)
            print(f'wrote {args.out} and {", ".join(pictures)}')
        return 0
    (a, _, name_a), (b, _, name_b) = (_evaluate_one(path, args) for path in args.compare)
    result = compare(a, b)
    d = result['delta']
    print(f'B - A: success {d["success_rate"] * 100:+.0f} points ({name_a} {a["success_rate"]:.0%}'
          f' -> {name_b} {b["success_rate"]:.0%}), mean error {d["mean_error"]:+.3g} '
          f'{a["error_unit"]}, RMS jerk {d["rms_jerk"]:+.3g}; only A solved episodes '
          f'{result["only_a_succeeded"]}, only B {result["only_b_succeeded"]}')
    if args.out:
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump({**result, 'names': [name_a, name_b], 'paths': list(args.compare),
                       'reports': [a, b]}, f, indent=1)
        print(f'wrote {args.out}')
    drop = -d['success_rate'] * 100
    if args.max_drop is not None and drop > args.max_drop:
        (la, ha), (lb, hb) = a['success_ci'], b['success_ci']
        overlap = ' (the two 95% intervals overlap: more episodes would tell them apart ' \
                  'better)' if lb <= ha and la <= hb else ''
        print(f'FAILED: B solves {drop:.0f} points fewer episodes than A (--max-drop '
              f'{args.max_drop:g}): A {name_a} {a["success_rate"]:.0%} (95% CI {la:.0%}-'
              f'{ha:.0%}), B {name_b} {b["success_rate"]:.0%} (95% CI {lb:.0%}-{hb:.0%}) over '
              f'{result["episodes"]} episodes{overlap}')
        return 1
    return 0


def _graph(args) -> int:
    from lamp_ros.graph.graph import Graph
    from lamp_ros.graph.render import render_svg
    from lamp_ros.graph.summary import print_summary
    with open(args.graph, encoding='utf-8') as f:
        graph = Graph.from_json(f.read())
    print_summary(graph)
    picture = output_path(args.svg or os.path.splitext(args.graph)[0] + '.svg', '--svg')
    _write(picture, render_svg(graph))
    print(f'picture: {picture}')
    return 0


def _dataset(args) -> int:
    from lamp_ros.dataset.build import build_dataset
    with progress_lines('dataset') as say:
        result = build_dataset(args.bags, args.out, fps=args.fps, task=args.task,
                               robot_type=args.robot_type, progress=say)
    repo_id = args.repo_id or f'local/{os.path.basename(os.path.abspath(args.out))}'
    print(f'wrote {len(result.episodes)} episodes, {result.frames} frames at {result.fps} fps, '
          f'tasks {list(result.tasks)} -> {result.out} (LeRobot v3.0)')
    print(f'load it: LeRobotDataset({repo_id!r}, root={result.out!r})')
    return 0


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='lamp', description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)

    p = sub.add_parser('demo', help='the trained demo policy driving the MuJoCo arm over ROS 2')
    p.add_argument('--seconds', type=float, default=0.0,
                   help='the episode\'s length (default: the world\'s, 12 s)')
    p.add_argument('--episode', type=int, default=0, help='which episode (cube place) to run')
    p.add_argument('--execution', choices=('async', 'sync'), default='async')
    p.set_defaults(func=_demo)

    p = sub.add_parser(
        'sim', help='a simulated robot: cameras + joint states following commands',
        usage='lamp sim [--world NAME [--moving SPEED]] [--ros-args -p NAME:=VALUE ...]',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description='A simulated robot on ROS 2: cameras and /joint_states, following the\n'
        'commands on /vla_policy/joint_trajectory. Its parameters come after --ros-args\n'
        '(lamp_ros/sim/robot.py, docs/robot.md).',
        epilog='examples:\n'
        '  lamp sim    the bundled 7-joint arm (config/robots/sim7.yaml)\n'
        '  lamp sim --world viperx_pick_place    a MuJoCo world: a published arm, a task\n'
        '  lamp sim --ros-args -p artifact:=artifacts/pi05_tiny    the robot it was built for,\n'
        '      or else its interface (cameras, joints, frame sizes, clamp limits)\n'
        '  lamp sim --ros-args -p robot_file:=config/robots/arm6_gripper.yaml')
    p.add_argument('--world', help='a world (a name under config/worlds/, or a file): the MuJoCo '
                   'arm and task of docs/sim.md')
    p.add_argument('--moving', type=float, metavar='SPEED',
                   help='with --world: the bin slides at SPEED m/s')
    p.add_argument('--expert', action='store_true',
                   help='with --world: the scripted expert drives the arm through the command '
                        'topic (demonstrations for lamp record)')
    p.add_argument('--episode', type=int, help='with --world: which episode (cube place)')
    p.add_argument('--one-episode', action='store_true',
                   help='with --world: start when a recorder listens, run one episode, exit '
                        '(status 1 if the task failed)')
    p.add_argument('--seconds', type=float, help='with --world: the episode\'s length')
    p.set_defaults(func=_sim, takes_ros_args=True)

    from lamp_ros.monitor.top import register as register_top
    register_top(sub)

    p = sub.add_parser('trace', help='trace a model spec into a typed stage graph (JSON)')
    p.add_argument('spec', help='model spec YAML, e.g. config/specs/pi05_tiny.yaml')
    p.add_argument('--out', required=True, help='graph JSON to write')
    p.add_argument('--no-export', action='store_true',
                   help='skip torch.export of model stages (no op-level subgraphs)')
    p.set_defaults(func=_trace)

    p = sub.add_parser('import', help='read a LeRobot / openpi checkpoint, write its model spec')
    p.add_argument('checkpoint', help='checkpoint folder (config.json, model.safetensors, ...)')
    p.add_argument('--tokenizer', required=True,
                   help='the sentencepiece tokenizer.model it was trained with')
    p.add_argument('--format', help='checkpoint format (default: detected); known: '
                   'those installed, e.g. lerobot, openpi')
    p.add_argument('--joint-names', help='comma-separated, action-vector order '
                   '(default: joint0..jointN-1)')
    p.add_argument('--asset-id', help='openpi: the assets/<asset_id> folder of the norm stats')
    p.add_argument('--robot', help='a robot file (config/robots/*.yaml) the spec names: joints, '
                   'limits, cameras')
    p.add_argument('--target', choices=('cpu', 'cuda'), default='cpu',
                   help='what the written spec compiles for')
    p.add_argument('--out', help='spec YAML to write (default: <checkpoint folder name>.yaml)')
    p.set_defaults(func=_import)

    p = sub.add_parser('compile', help='compile a model spec into a versioned artifact')
    p.add_argument('spec', help='model spec YAML, e.g. config/specs/pi05_tiny.yaml')
    p.add_argument('--out', required=True, help='artifact directory to write')
    p.add_argument('--measure-tiles', action='store_true',
                   help='cuda: time every kernel choice on this GPU, the tile cache unread')
    p.set_defaults(func=_compile)

    p = sub.add_parser('run', help='run an artifact on synthetic observations, print a profile')
    p.add_argument('artifact')
    p.add_argument('--ticks', type=int, default=110, help='control ticks (default: 5 s at 22 Hz)')
    p.add_argument('--execution', choices=('sync', 'async'), default='sync')
    p.add_argument('--fast', action='store_true', help='back to back instead of real time')
    p.add_argument('--trace', help='write a Chrome/Perfetto trace JSON here')
    p.set_defaults(func=_run)

    p = sub.add_parser('bench', help='eager reference vs compiled runtime in one run')
    p.add_argument('artifact')
    p.add_argument('--runs', type=int, default=30)
    p.add_argument('--json', action='store_true')
    p.set_defaults(func=_bench)

    from lamp_ros.regress.commands import register as register_regress
    register_regress(sub)

    p = sub.add_parser('eval', help='closed-loop episodes of a world\'s task: success (with its '
                       '95% CI), error, smoothness')
    p.add_argument('artifact', nargs='?', help='an artifact, or a spec (.yaml): its eager policy')
    p.add_argument('--world', help='a world (a name under config/worlds/, or a file): MuJoCo '
                   'physics with a published arm (docs/sim.md); default: the 2D test scene')
    p.add_argument('--moving', type=float, metavar='SPEED',
                   help='with --world: the task\'s moving variant, the bin sliding at SPEED m/s')
    p.add_argument('--compare', nargs=2, metavar=('A', 'B'),
                   help='evaluate two artifacts (or specs) on the same episodes: B against A')
    p.add_argument('--max-drop', type=float,
                   help='with --compare: exit 1 when B\'s success rate is more than this many '
                        'points below A\'s')
    p.add_argument('--episodes', type=int, default=10)
    p.add_argument('--seconds', type=float,
                   help='length of an episode (default: the world\'s; the 2D scene: 10)')
    p.add_argument('--latency-ticks', type=int, default=0,
                   help='each tick sees the observation of D ticks earlier')
    p.add_argument('--seed', type=int, default=0, help='where the episodes put the cube')
    from lamp_ros.ops.chunker import MERGE_CHOICES
    p.add_argument('--merge-mode', choices=MERGE_CHOICES,
                   help='override how a new chunk is merged into the plan (rtc: a spec, or '
                        'an artifact built with that rtc mode)')
    p.add_argument('--expert', action='store_true',
                   help='the scripted expert, for reference (at the artifact\'s rate and max '
                        'step; with --world and no artifact: within the world\'s robot limits)')
    p.add_argument('--workers', type=int, default=1,
                   help='run episodes in N local processes (the report is the same)')
    p.add_argument('--ray', metavar='ADDRESS',
                   help='run episodes on a Ray cluster (optional extra: pip install ray), '
                        'in --workers actors; `auto` or host:port')
    p.add_argument('--out', help='report JSON (PNGs of the errors and of one success and one '
                   'failure are written beside it)')
    p.set_defaults(func=_eval)

    p = sub.add_parser('graph', help='summarise a graph JSON and draw it as SVG')
    p.add_argument('graph')
    p.add_argument('--svg', help='picture path (default: next to the JSON)')
    p.set_defaults(func=_graph)

    p = sub.add_parser('dataset', help='recordings (bags) -> a LeRobot v3.0 dataset, one '
                       'episode per bag')
    p.add_argument('bags', nargs='+', metavar='BAG', help='rosbag2 folders, in episode order')
    p.add_argument('--out', required=True, help='dataset folder to write (new or empty)')
    p.add_argument('--fps', type=int, help='frame rate (default: the recorded command rate, '
                   'rounded)')
    p.add_argument('--task', help='task text of every episode (default: the prompt in the '
                   'node\'s session record)')
    p.add_argument('--repo-id', help='the name LeRobot loads it by (default: local/<out name>); '
                   'printed, not stored')
    p.add_argument('--robot-type', help='info.json robot_type (default: none)')
    p.set_defaults(func=_dataset)

    from lamp_ros.whitebox.commands import register
    register(sub)
    return parser


def split_ros_args(argv: list) -> tuple:
    """(lamp's own arguments, the ROS arguments: `--ros-args` and all after it). A `--` just
    before `--ros-args` is dropped (`lamp sim -- --ros-args ...` is the same command)."""
    if '--ros-args' not in argv:
        return argv, []
    i = argv.index('--ros-args')
    return argv[:i - 1] if i and argv[i - 1] == '--' else argv[:i], argv[i:]


def main(argv=None) -> int:
    parser = build_parser()
    own, ros_args = split_ros_args(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(own)
    if ros_args and not getattr(args, 'takes_ros_args', False):
        parser.error(f'{args.command}: --ros-args: only lamp sim takes ROS arguments')
    args.ros_args = ros_args
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f'lamp {args.command}: error: {exc}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
