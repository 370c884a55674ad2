"""The test harness settles a lifecycle transition whose reply never came (DDS can drop a
service request or reply right after discovery): with no time allowed for any reply, every
attempt counts as lost, so the answer must come from the node's state."""

import pytest

pytestmark = pytest.mark.ros

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


def test_each_test_session_holds_a_ros_domain_of_its_own():
    """conftest.claim_ros_domain: a domain held (here, by this session) is not handed out again
    until its holder lets go; the session's own domain is the one in the environment."""
    import os

    import conftest
    first, first_lock = conftest.claim_ros_domain()
    second, second_lock = conftest.claim_ros_domain()
    try:
        assert first != second
        if hasattr(conftest, '_DOMAIN'):  # claimed at start-up, not set from outside
            assert conftest._DOMAIN == int(os.environ['ROS_DOMAIN_ID'])
            assert conftest._DOMAIN not in (first, second)
    finally:
        first_lock.close()
        second_lock.close()
    again, again_lock = conftest.claim_ros_domain()
    again_lock.close()
    assert again in (first, second)  # let go, the same ids are free again
