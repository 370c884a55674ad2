"""`~/hold` and `~/resume`: an operator stops the policy from moving the robot, and lets it
drive again from a new episode.

While held, inference no longer drives the robot. With `hold_mode: position` the node publishes
where the joints are (the last joint state; the last command before any) every tick; with
`empty` it publishes one empty JointTrajectory, on which a JointTrajectoryController holds its
current position, and nothing more. Both answers say what was done; both are logged.
"""


class Hold:
    """The hold state of one node (`held`: None, or {'since': t, 'position': q or None})."""

    def __init__(self):
        self.held = None

    def request(self, active: bool, mode: str, output: str, joints, last_command,
                now: float) -> tuple:
        """(ok, message, what to publish now: a position, 'empty', or None) for ~/hold."""
        if not active:
            return False, 'not active: nothing to hold', None
        if self.held is not None:
            return True, f'already held since {self.held["since"]:.3f} s', None
        if mode == 'empty' and output == 'joint_trajectory':
            position = None
        else:
            position = joints if joints is not None else last_command
            if position is None:
                return False, 'no joint state and no command yet: no position to hold at', None
        self.held = {'since': now, 'position': position}
        what = 'an empty trajectory' if position is None else \
            'position [' + ', '.join(f'{v:+.3f}' for v in position) + ']'
        return True, (f'held: {what}; the policy does not move the robot until ~/resume'), \
            'empty' if position is None else position

    def resume(self, active: bool) -> tuple:
        """(ok, message) for ~/resume; on success the caller starts a new episode."""
        if not active or self.held is None:
            return False, 'not held' if active else 'not active'
        self.held = None
        return True, 'resumed: new episode'

    def position(self):
        """What a held tick publishes: the held position, or None (empty mode, not held)."""
        return None if self.held is None else self.held['position']
