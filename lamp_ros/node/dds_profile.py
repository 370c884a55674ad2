"""The Fast DDS profile our own processes start with (config/fastdds.xml), and why here.

Raw camera frames are larger than a default Fast DDS publisher's shared-memory segment: sent
from another process on the same host, most of them are dropped before the node sees them. The
profile makes our participants take their data over UDP with a large socket receive buffer (the
XML says how and why). Fast DDS reads the file named by FASTDDS_DEFAULT_PROFILES_FILE once per
process, when the first participant is created, so every entry point (vla_node, `lamp sim`,
`lamp record`, `lamp replay --live`, `lamp demo`) calls `use_lamp_profile()` before rclpy.init,
and the launch file sets the same default for the node it starts.

This is the middleware's configuration, not a behaviour switch of ours: a profile the user chose
(the variable set, or DEFAULT_FASTDDS_PROFILES.xml in the working directory, which Fast DDS also
reads) always wins, and with another RMW (RMW_IMPLEMENTATION=rmw_cyclonedds_cpp ...) nothing is
set.
"""

import os

PROFILE_VARIABLE = 'FASTDDS_DEFAULT_PROFILES_FILE'
PROFILE = 'fastdds.xml'
INTEROP_PROFILE = 'fastdds_interop.xml'
RMEM_MAX = '/proc/sys/net/core/rmem_max'
# What raw images at camera rate need of net.core.rmem_max (docs/node.md: Raw images): below
# it the kernel grants the node's sockets less than three full-HD-ish frames of buffer.
RMEM_MAX_NEEDED = 4 * 1024 * 1024


def profile_path(name: str = PROFILE) -> str:
    """config/<name> of the source tree, else of the installed package's share folder."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, 'config', name)
    if os.path.isfile(path):
        return path
    from ament_index_python.packages import get_package_share_directory
    return os.path.join(get_package_share_directory('lamp_ros'), 'config', name)


def on_fast_dds(environ=None) -> bool:
    """True when rclpy will run on Fast DDS: the ROS default, or an rmw_fastrtps_* chosen."""
    rmw = (os.environ if environ is None else environ).get('RMW_IMPLEMENTATION', '')
    return not rmw or rmw.startswith('rmw_fastrtps')


def use_lamp_profile(environ=None) -> str | None:
    """Name config/fastdds.xml in FASTDDS_DEFAULT_PROFILES_FILE unless the user chose a profile
    or another RMW. Returns the profile the process will use (None: none of ours or theirs)."""
    environ = os.environ if environ is None else environ
    if not on_fast_dds(environ):
        return None
    if environ.get(PROFILE_VARIABLE):
        return environ[PROFILE_VARIABLE]
    if environ.get('SKIP_DEFAULT_XML_FILE') != '1' and os.path.isfile(
            'DEFAULT_FASTDDS_PROFILES.xml'):
        return os.path.abspath('DEFAULT_FASTDDS_PROFILES.xml')
    environ[PROFILE_VARIABLE] = profile_path()
    return environ[PROFILE_VARIABLE]


def receive_buffer_warning(path: str = RMEM_MAX) -> str:
    """'' when the kernel lets the node's sockets buffer raw frames at camera rate, else what
    to change (a host setting: only root can raise it)."""
    try:
        with open(path, encoding='ascii') as f:
            rmem_max = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return ''
    if rmem_max >= RMEM_MAX_NEEDED:
        return ''
    return (f'net.core.rmem_max is {rmem_max} bytes: UDP receive buffers stay small, and raw '
            f'camera frames from other processes get lost; raise it to at least '
            f'{RMEM_MAX_NEEDED} (root, sysctl; docs/node.md: Raw images)')
