"""The Fast DDS profile our processes start with (lamp_ros/node/dds_profile.py): chosen only
where the user chose none and the RMW is Fast DDS, read by Fast DDS without an error, and the
Cyclone interop profile holds the same settings. What the profile does for raw images is
test_raw_images.py's."""

import copy
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from lamp_ros.node import dds_profile

NS = {'f': 'http://www.eprosima.com'}


def test_our_profile_unless_the_user_chose_one_or_another_rmw(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {}
    path = dds_profile.use_lamp_profile(env)
    assert env == {'FASTDDS_DEFAULT_PROFILES_FILE': path}
    assert path.endswith(os.path.join('config', 'fastdds.xml')) and os.path.isfile(path)
    for rmw in ('rmw_fastrtps_cpp', 'rmw_fastrtps_dynamic_cpp'):
        assert dds_profile.use_lamp_profile({'RMW_IMPLEMENTATION': rmw}) == path
    # the user's profile wins
    env = {'FASTDDS_DEFAULT_PROFILES_FILE': '/their/profile.xml'}
    assert dds_profile.use_lamp_profile(env) == '/their/profile.xml'
    assert env == {'FASTDDS_DEFAULT_PROFILES_FILE': '/their/profile.xml'}
    # ... also the one Fast DDS finds in the working directory by itself
    (tmp_path / 'DEFAULT_FASTDDS_PROFILES.xml').write_text('<dds/>')
    env = {}
    assert dds_profile.use_lamp_profile(env) == str(tmp_path / 'DEFAULT_FASTDDS_PROFILES.xml')
    assert env == {}
    env = {'SKIP_DEFAULT_XML_FILE': '1'}  # ... unless Fast DDS is told to skip it
    assert dds_profile.use_lamp_profile(env) == path
    # another RMW: nothing of Fast DDS's
    env = {'RMW_IMPLEMENTATION': 'rmw_cyclonedds_cpp'}
    assert dds_profile.use_lamp_profile(env) is None
    assert env == {'RMW_IMPLEMENTATION': 'rmw_cyclonedds_cpp'}


def test_receive_buffer_warning_names_the_host_setting(tmp_path):
    rmem_max = tmp_path / 'rmem_max'
    rmem_max.write_text('212992\n')
    warning = dds_profile.receive_buffer_warning(str(rmem_max))
    assert 'net.core.rmem_max is 212992' in warning and 'docs/node.md' in warning
    rmem_max.write_text(f'{dds_profile.RMEM_MAX_NEEDED}\n')
    assert dds_profile.receive_buffer_warning(str(rmem_max)) == ''
    assert dds_profile.receive_buffer_warning(str(tmp_path / 'absent')) == ''


def test_the_interop_profile_is_ours_plus_type_propagation_off():
    ours = ET.parse(dds_profile.profile_path()).getroot()
    interop = ET.parse(dds_profile.profile_path(dds_profile.INTEROP_PROFILE)).getroot()
    rtps = interop.find('f:profiles/f:participant/f:rtps', NS)
    policy = rtps.find('f:propertiesPolicy', NS)
    names = {p.findtext('f:name', namespaces=NS): p.findtext('f:value', namespaces=NS)
             for p in policy.iter(f'{{{NS["f"]}}}property')}
    assert names == {'fastdds.type_propagation': 'disabled'}
    rest = copy.deepcopy(interop)
    rest.find('f:profiles/f:participant/f:rtps', NS).remove(
        rest.find('f:profiles/f:participant/f:rtps/f:propertiesPolicy', NS))
    for root in (ours, rest):
        root.find('f:profiles/f:participant', NS).set('profile_name', '')
    assert ET.canonicalize(ET.tostring(rest), strip_text=True) == \
        ET.canonicalize(ET.tostring(ours), strip_text=True)


@pytest.mark.ros
@pytest.mark.parametrize('name', [dds_profile.PROFILE, dds_profile.INTEROP_PROFILE])
def test_fast_dds_reads_the_profile_without_an_error(name, tmp_path):
    """Fast DDS falls back to its defaults when a profile file does not parse, printing an
    error and nothing more: a participant and a subscription made with it must print none."""
    script = ('import rclpy\nfrom rclpy.node import Node\nfrom sensor_msgs.msg import Image\n'
              'rclpy.init()\nnode = Node("profile_check")\n'
              'node.create_subscription(Image, "/profile_check", lambda m: None, 1)\n'
              'node.destroy_node()\nrclpy.shutdown()\nprint("made")\n')
    env = dict(os.environ, FASTDDS_DEFAULT_PROFILES_FILE=dds_profile.profile_path(name))
    run = subprocess.run([sys.executable, '-c', script], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and 'made' in run.stdout, run.stderr
    assert 'Error' not in run.stderr and 'XMLPARSER' not in run.stderr, run.stderr
