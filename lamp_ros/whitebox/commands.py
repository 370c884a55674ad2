"""The white-box subcommands of `lamp`: inspect, diff, verify, profile.

`register(subparsers)` adds them to the `lamp` parser; each handler calls one public function
and imports it lazily, so `lamp --help` stays fast and no command pulls in another's libraries.
"""


def _inspect(args) -> int:
    from lamp_ros.whitebox.inspect import run_inspect
    return run_inspect(args.artifact, as_json=args.json)


def _diff(args) -> int:
    if args.layers:
        from lamp_ros.whitebox.layer_diff import run_layer_diff
        return run_layer_diff(args.a, args.b, as_json=args.json, png=args.png,
                              observations=args.observations, samples=args.samples,
                              threshold=args.threshold)
    from lamp_ros.whitebox.diff_report import run_diff
    return run_diff(args.a, args.b, as_json=args.json, fail_on_change=args.fail_on_change)


def _verify(args) -> int:
    from lamp_ros.whitebox.verify import run_verify
    return run_verify(args.artifact, as_json=args.json)


def _profile(args) -> int:
    from lamp_ros.whitebox.profile import run_profile
    return run_profile(args.artifact, args.out, ticks=args.ticks, save=args.save,
                       ort_runs=args.ort_runs)


def register(sub) -> None:
    p = sub.add_parser('inspect', help='show an artifact: identity, ABI, plan, memory, evidence')
    p.add_argument('artifact')
    p.add_argument('--json', action='store_true', help='plain JSON instead of tables')
    p.set_defaults(func=_inspect)

    p = sub.add_parser('diff', help='what changed between two artifacts, and where time went')
    p.add_argument('a', help='artifact directory (before)')
    p.add_argument('b', help='artifact directory (after)')
    p.add_argument('--json', action='store_true', help='plain JSON instead of text')
    p.add_argument('--fail-on-change', action='store_true',
                   help='exit 1 when a cause differs: anything in the artifact id (spec, '
                   'graph, weights, plan, precision plan, memory plan, tools, files)')
    p.add_argument('--layers', action='store_true',
                   help='run both on the same observations and compare every layer\'s output '
                   'inside their ONNX Runtime groups: the error each adds, the first to diverge')
    p.add_argument('--png', help='--layers: also draw the layers\' errors in this PNG file '
                   '(its folder is made if missing)')
    p.add_argument('--observations', help='--layers: a folder of .npz observations (default: '
                   'A\'s stored parity samples)')
    p.add_argument('--samples', type=int, default=4, help='--layers: observations to run')
    p.add_argument('--threshold', type=float, default=1e-2,
                   help='--layers: the output error (max rel) that counts as diverged')
    p.set_defaults(func=_diff)

    p = sub.add_parser('verify', help='checksums, schemas and parity re-run on stored evidence')
    p.add_argument('artifact')
    p.add_argument('--json', action='store_true')
    p.set_defaults(func=_verify)

    p = sub.add_parser('profile', help='profile an artifact: trace, histograms, timeline, top')
    p.add_argument('artifact')
    p.add_argument('--out', required=True, metavar='FOLDER',
                   help='a folder (made if missing) that gets trace.json, hist.png, '
                        'timeline.png, ops.json, profile.json, and GROUP.kernels.json / .png '
                        'for each cuda group')
    p.add_argument('--ticks', type=int, default=30,
                   help='inference ticks, back to back (default 30)')
    p.add_argument('--ort-runs', type=int, default=5,
                   help='runs of each ONNX Runtime group under ORT profiling, and replays '
                        "of each cuda group's CUDA graphs under torch's profiler (default 5; "
                        '0: neither)')
    p.add_argument('--save', action='store_true',
                   help='also store the profile as DIR/evidence/profile.json (id unchanged)')
    p.set_defaults(func=_profile)
