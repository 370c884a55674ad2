"""The observation at the policy boundary and the interface a policy declares
(lamp_ros/observation.py): any camera names and count, no cameras, no prompt."""

import numpy as np
import pytest

from lamp_ros.observation import PolicyInterface, validate_observation


def test_an_interface_makes_its_own_examples():
    one = PolicyInterface(('front',), ('a', 'b'), prompt=False, camera_sizes={'front': (96, 128)},
                          state_low=(-1.0, 0.0), state_high=(1.0, 0.5))
    obs = one.example_observation(seed=3)
    assert set(obs) == {'images', 'state'}  # no prompt: none made
    assert obs['images']['front'].shape == (96, 128, 3)
    assert (obs['state'] >= [-1.0, 0.0]).all() and (obs['state'] <= [1.0, 0.5]).all()
    np.testing.assert_array_equal(obs['images']['front'],
                                  one.example_observation(seed=3)['images']['front'])
    blind = PolicyInterface((), ('j',), prompt=True)
    assert blind.example_observation(prompt='go')['prompt'] == 'go'
    assert blind.example_observation()['images'] == {}
    assert PolicyInterface(('cam',), ('j',)).example_observation()['images']['cam'].shape == \
        (480, 640, 3)  # no typical size given: a VGA frame


@pytest.mark.parametrize('kwargs,message', [
    ({'joint_names': ()}, 'at least one joint'),
    ({'camera_slots': ('a', 'a')}, 'interface.camera_slots: duplicates'),
    ({'camera_sizes': {'side': (1, 1)}}, "interface.camera_sizes: \\['side'\\] are not"),
    ({'state_low': (0.0,)}, 'interface.state_low: 1 values for 2 joints'),
])
def test_a_bad_interface_names_the_field(kwargs, message):
    args = {'camera_slots': ('front',), 'joint_names': ('a', 'b'), **kwargs}
    with pytest.raises(ValueError, match=message):
        PolicyInterface(**args)


def test_validation_follows_the_interface():
    image = np.zeros((4, 4, 3), np.uint8)
    obs = validate_observation({'images': {'front': image}, 'state': [0.1, 0.2]}, ('front',), 2,
                               prompt=False)
    assert obs.state.dtype == np.float32
    with pytest.raises(ValueError, match=r"observation: missing \['prompt'\]"):
        validate_observation({'images': {'front': image}, 'state': [0.1, 0.2]}, ('front',), 2)
    with pytest.raises(ValueError, match="images\\['base'\\]: unknown camera; known: front"):
        validate_observation({'images': {'base': image}, 'state': [0, 0]}, ('front',), 2, False)
    with pytest.raises(ValueError, match='images: no camera image given'):
        validate_observation({'images': {}, 'state': [0, 0]}, ('front',), 2, False)
    blind = validate_observation({'state': [0.0]}, (), 1, prompt=False)  # no cameras at all
    assert blind.images == {}
