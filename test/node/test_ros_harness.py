"""The test harness settles a lifecycle transition whose reply never came (DDS can drop a
service request or reply right after discovery): with no time allowed for any reply, every
attempt counts as lost, so the answer must come from the node's state."""

CONFIGURE, ACTIVATE = 1, 3


def test_transition_without_its_reply_is_settled_by_the_state(tiny_artifact, make_harness):
    h = make_harness(tiny_artifact, sim=False)
    try:
        assert h.transition(CONFIGURE, attempt_s=0.0)
        assert h.state() == 'inactive'
        assert h.transition(ACTIVATE, attempt_s=0.0)
        assert h.state() == 'active'
    finally:
        log = h.stop()
    assert 'Traceback' not in log, log
