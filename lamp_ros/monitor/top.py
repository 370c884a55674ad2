"""`lamp top`: a running vla_node from a terminal.

Without an action it shows the node live (rich.live on a terminal, with keys for the lifecycle
and hold / resume; a summary line every --period seconds otherwise, for a log). One-shot
actions (`--configure --activate`, `--hold`, `--resume`, `--state`, `--once`) run in the order
given and exit: 0 when each did what it says, 1 when the node refused one (its reason and the
node's own log lines printed), 2 when the node did not answer within --timeout.
"""

import sys
import time

ACTIONS = {
    'configure': 'lifecycle configure: load the artifact (done if already configured)',
    'activate': 'lifecycle activate: start an episode and the control loop',
    'deactivate': 'lifecycle deactivate: stop the control loop',
    'cleanup': 'lifecycle cleanup: release the artifact',
    'hold': '~/hold: the policy stops moving the robot (the node must be active)',
    'resume': '~/resume: the policy drives again, from a new episode',
    'state': 'print the lifecycle state',
}
# the state each transition starts from (lifecycle_msgs' state machine)
STARTS_FROM = {'configure': 'unconfigured', 'cleanup': 'inactive', 'activate': 'inactive',
               'deactivate': 'active'}
KEYS = {'c': 'configure', 'a': 'activate', 'd': 'deactivate', 'u': 'cleanup', 'h': 'hold',
        'r': 'resume'}


def register(sub) -> None:
    """Add `lamp top` to the `lamp` parser's subcommands."""
    p = sub.add_parser(
        'top', help='a running vla_node: live status, or one-shot actions (configure, '
        'activate, hold, resume, ...)',
        description='Shows a running vla_node\'s /diagnostics and profile live, or runs '
        'one-shot actions on it (no ros2 CLI needed): lifecycle transitions, hold and resume. '
        'Actions run in the order given; exit 1 when the node refuses one, 2 when it does not '
        'answer within --timeout.')
    p.add_argument('--node', default='/vla_policy', help='the node (default /vla_policy)')
    for name, doc in ACTIONS.items():
        p.add_argument(f'--{name}', dest='actions', action='append_const', const=name, help=doc)
    p.add_argument('--once', action='store_true',
                   help='print one snapshot of the node\'s status and profile, and exit')
    p.add_argument('--timeout', type=float, default=20.0,
                   help='seconds to wait for the node and for each answer (default 20)')
    p.add_argument('--period', type=float, default=1.0,
                   help='live view: seconds between refreshes (a summary line each, off a '
                        'terminal)')
    p.set_defaults(func=run_top)


def run_top(args) -> int:
    from lamp_ros.monitor.client import NodeClient, NoAnswer
    client = NodeClient(args.node)
    try:
        if not client.wait_for_node(args.timeout):
            return _fail(f'{client.node_name}: no lifecycle services within {args.timeout:.0f} s '
                         '(is vla_node running, with the same ROS_DOMAIN_ID?)', 2)
        for action in args.actions or []:
            ok, message = run_action(client, action, args.timeout)
            print(f'{action}: {message}', flush=True)
            if not ok:
                return 1
        if args.once:
            return print_once(client, args.timeout)
        if args.actions:
            return 0
        return live(client, args.period, args.timeout)
    except NoAnswer as exc:
        return _fail(str(exc), 2)
    except KeyboardInterrupt:
        return 0
    finally:
        client.close()


def run_action(client, action: str, timeout: float) -> tuple:
    """(ok, what happened) of one action. A lifecycle transition the node refuses adds the
    node's warnings and errors of that moment (configure failing says why only there)."""
    if action == 'state':
        return True, client.state(timeout)
    if action in ('hold', 'resume'):
        return client.trigger(action, timeout)
    since = time.time()
    ok, state = client.transition(action, timeout)
    message = f'ok, the node is {state}' if ok else f'failed, the node is {state}'
    if not ok and state != STARTS_FROM[action]:
        message += f' ({action} starts from {STARTS_FROM[action]})'
    if not ok:
        time.sleep(0.5)  # its log lines travel on /rosout, a little behind the answer
        lines = client.log_since(since - 0.2)
        if lines:
            message += '\n  node log:\n' + '\n'.join(f'    {line}' for line in lines[-10:])
    return ok, message


def print_once(client, timeout: float) -> int:
    """One snapshot: the lifecycle state, and while active the next /diagnostics status (the
    node reports every second) and profile."""
    from rich.console import Console

    from lamp_ros.monitor.client import wait_for
    from lamp_ros.monitor.view import render
    state = client.state(timeout)
    if state == 'active' and not client.wait_for_status(timeout, after=time.monotonic()):
        return _fail(f'{client.node_name} is active but sent no /diagnostics status in '
                     f'{timeout:.0f} s', 2)
    if state == 'active':  # the profile is published right after the status
        wait_for(lambda: client.profile is not None, 2.0)
    Console(soft_wrap=False).print(render(client))
    return 0


def live(client, period: float, timeout: float) -> int:
    from rich.console import Console
    from rich.live import Live

    from lamp_ros.monitor.view import render, summary_line
    console = Console()
    client.poll_state()
    if not console.is_terminal or not sys.stdin.isatty():
        while True:  # a log: one line per period
            time.sleep(period)
            client.poll_state()
            print(summary_line(client), flush=True)
    note = ''
    first = render(client, keys=True)
    with KeyReader() as read_key, Live(first, console=console, auto_refresh=False) as view:
        while True:
            key = read_key(period)
            client.poll_state()
            if key == 'q':
                return 0
            if key in KEYS:
                view.update(render(client, f'{KEYS[key]}: waiting for the node', True),
                            refresh=True)
                try:
                    ok, message = run_action(client, KEYS[key], timeout)
                    note = f'{KEYS[key]}: {message}'
                except Exception as exc:  # NoAnswer: say it and keep watching
                    note = f'{KEYS[key]}: {exc}'
            view.update(render(client, note, True), refresh=True)


class KeyReader:
    """Single key presses from a terminal without Enter (cbreak mode, restored on exit):
    read_key(timeout) -> the key, or '' when none came."""

    def __enter__(self):
        import termios
        import tty
        self._fd = sys.stdin.fileno()
        self._saved = termios.tcgetattr(self._fd)
        tty.setcbreak(self._fd)
        return self.read

    def read(self, timeout: float) -> str:
        import select
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        return sys.stdin.read(1).lower() if ready else ''

    def __exit__(self, *exc):
        import termios
        termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
        return False


def _fail(message: str, code: int) -> int:
    print(f'lamp top: {message}', file=sys.stderr, flush=True)
    return code
