"""A replay report (replay.py, live.py) as the lines `lamp replay` prints.

The first line is the verdict; the next ones say what the verdict rests on: where the replay
began and why (a mid-episode recording is said, never hidden), what was not compared, inputs
the recorder lost, and whether an asynchronous run followed the recorded schedule.
"""


def _start_line(report: dict) -> str | None:
    start = report.get('start') or {}
    kind, skipped = start.get('kind'), report.get('commands_before_start', 0)
    if kind == 'episode state':
        why = ('the bag starts mid-episode' if report.get('starts_mid_episode') else
               'the bag lacks inputs the node used before it')
        return (f'  {why}: replayed from the episode state the node published at tick '
                f'{start["tick"]}; the {skipped} commands before it are not compared')
    if kind == 'episode start' and skipped:
        return (f'  replayed from the episode start at tick {start["tick"]}: the {skipped} '
                'commands before it (an episode the bag does not start) are not compared')
    if kind == 'unknown':
        return ('  the bag starts mid-episode and holds no episode state this artifact can '
                'take: replayed from an empty plan, so early commands can differ')
    return None


def replay_lines(report: dict, atol: float, rtol: float) -> list:
    verdict = 'PASSED' if report['passed'] else 'FAILED'
    lines = [f'{verdict}: {report["messages"]} commands, max abs error '
             f'{report["max_abs_error"]}, {report["within_tolerance_pct"]:.1f}% within atol '
             f'{atol} / rtol {rtol}; first failure: {report["first_failure"]}']
    start = _start_line(report)
    if start:
        lines.append(start)
    if report.get('commands_held_by_hold'):
        lines.append(f'  {report["commands_held_by_hold"]} commands published under ~/hold '
                     '(the joints, not the policy) are not compared')
    if report.get('inputs_substituted'):
        before = (f'; the {report["exact_commands"]} commands before the first '
                  f'{"agree" if report["exact_passed"] else "do not agree"}'
                  if report['exact_commands'] else '')
        lines.append(f'  {report["inputs_substituted"]} inputs the node used are not in the bag '
                     f'(the recorder had not matched them yet, or lost them) and were '
                     f'substituted{before}')
    if report.get('commands_from_lost_inputs'):
        lines.append(f'  {report["commands_from_lost_inputs"]} commands computed after a lost '
                     'input, until the node\'s next episode state, are not judged')
    checks = report.get('state_checks') or {}
    if checks.get('compared'):
        lines.append(f'  episode state checked at {checks["compared"]} merged chunks: '
                     f'{checks["equal"]} equal to the node\'s, '
                     f'{checks["resynced_after_lost_inputs"]} taken over after a lost input, '
                     f'{checks["mismatched"]} different')
    schedule = report.get('schedule') or {}
    off = {k: v for k, v in schedule.items() if v}
    if off:
        lines.append('  the asynchronous schedule was left: ' +
                     ', '.join(f'{k.replace("_", " ")} {v}' for k, v in off.items()))
    artifact, recorded = report.get('artifact_id'), report.get('recorded_artifact_id')
    if recorded and artifact and recorded != artifact:
        lines.append(f'  recorded with artifact {recorded[:16]}, replayed through '
                     f'{artifact[:16]}')
    if report.get('mode') == 'live':
        lines.append(f'  live: graph matched after {report["discovery_s"]:.2f} s, '
                     f'{report["commands_received"]} commands received; against the bag\'s '
                     f'commands (nearest in time, {report["recorded_commands_matched"]} '
                     f'paired): {report["recorded_within_tolerance_pct"]:.1f}% within')
    return lines
