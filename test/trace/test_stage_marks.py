"""`@stage` refuses what it cannot mark, with the fix, when the policy class is defined."""

import pytest

from lamp_ros.api import stage


def test_a_model_stage_is_not_marked_with_stage():
    with pytest.raises(ValueError, match=r"stage net: a model stage is model_stage\('net', "):
        stage('net', 'model')


def test_a_stateful_stage_names_its_state():
    with pytest.raises(ValueError, match='names its state'):
        stage('noise', 'stateful')
    assert stage('noise', 'stateful', state='noise')(lambda self: None).__lamp_stage__.state == \
        'noise'
