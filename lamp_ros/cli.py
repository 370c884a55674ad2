"""`lamp`: the command line. Thin: each subcommand calls one public function."""

import argparse
import sys


def _demo(args) -> int:
    from lamp_ros.demo import run_demo
    return run_demo(preset=args.preset, seed=args.seed, runs=args.runs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='lamp', description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)

    demo = sub.add_parser('demo', help='build the tiny policy and run it on example inputs')
    demo.add_argument('--preset', default='pi05_tiny')
    demo.add_argument('--seed', type=int, default=0)
    demo.add_argument('--runs', type=int, default=20, help='timed inferences after warm-up')
    demo.set_defaults(func=_demo)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f'lamp {args.command}: error: {exc}', file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
